"""The docker backend against a real engine and the locally built base image: every limit is attacked by the
command it limits, and nothing (container, image layer, mount) outlives a run. The attacks shared with bubblewrap
(network, host files, fork and memory bombs, the deadline, output, file size, the work dir's bytes) run on both
backends in ``test_abuse.py``; here are the container's own. Skipped, with the reason, where
no engine runs or the base image is not built (`make docker` does both where the machine allows it)."""

from __future__ import annotations

import os

import pytest

from pivotgym.errors import SandboxError, SandboxUnavailable
from pivotgym.sandbox import Limits, Mount, get_sandbox
from pivotgym.sandbox.docker import DockerSandbox, leftover_containers, running_sandbox_containers, unavailable_reason
from pivotgym.sandbox.images import (
    BASE_IMAGE,
    ImageBuildError,
    ImageRecipe,
    docker,
    ensure_image,
    missing_image_message,
)

REASON = unavailable_reason()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(REASON is not None, reason=f"docker backend: {REASON}")]


@pytest.fixture()
def box():
    before = set(running_sandbox_containers(this_process=True))
    yield DockerSandbox()
    assert set(running_sandbox_containers(this_process=True)) <= before, "a container outlived its run"
    assert not leftover_containers()


def test_runs_in_the_base_image_as_an_unprivileged_user(box, tmp_path):
    result = box.run(
        "id -u; grep CapEff /proc/self/status; python3 -c 'import sys; print(sys.version_info[:2])'", tmp_path
    )
    uid, caps, version = result.stdout.splitlines()
    assert result.ok and result.backend == "docker", result
    if os.geteuid() == 0:
        assert int(uid) != 0  # a leased uid of the pool, never root
    assert caps.split()[1] == "0000000000000000"  # no capabilities
    assert version == "(3, 11)"


def test_the_work_dir_is_the_only_writable_place_and_the_host_is_invisible(box, tmp_path):
    result = box.run(
        "echo ok > out.txt; for p in /etc/x /usr/x /x; do touch $p 2>/dev/null && echo WROTE $p; done; "
        f"ls {os.getcwd()} 2>/dev/null && echo SEES-HOST; pwd",
        tmp_path,
    )
    assert (tmp_path / "out.txt").read_text() == "ok\n"
    assert "WROTE" not in result.stdout and "SEES-HOST" not in result.stdout, result.stdout
    assert result.stdout.strip().endswith("/repo")


def test_processes_are_capped_and_a_fork_bomb_ends(box, tmp_path):
    limits = Limits(max_processes=32, wall_seconds=20)
    spawn = (
        "import subprocess\nstarted, failed = [], 0\nfor _ in range(100):\n"
        "    try:\n        started.append(subprocess.Popen(['sleep', '3']))\n"
        "    except OSError:\n        failed += 1\nprint(len(started), failed)\n"
    )
    result = box.run(["python3", "-c", spawn], tmp_path, limits=limits)
    started, failed = map(int, result.stdout.split())
    assert started < 32 and failed == 100 - started, result
    bomb = box.run("b() { b | b & }; b", tmp_path, limits=limits.with_(wall_seconds=5))
    assert bomb.duration < 30  # ended by the deadline at the latest, and the container is gone (fixture)


def test_cpu_is_capped(box, tmp_path):
    burn = (
        "import multiprocessing as m, os, time\n"
        "def spin():\n    end = time.time() + 3\n    while time.time() < end: pass\n"
        "ps = [m.Process(target=spin) for _ in range(2)]\n[p.start() for p in ps]; [p.join() for p in ps]\n"
        "print(sum(os.times()[2:4]))\n"
    )
    (tmp_path / "burn.py").write_text(burn)
    result = box.run(["python3", "burn.py"], tmp_path, limits=Limits(cpu_quota=0.5, wall_seconds=30))
    assert result.ok, result
    assert float(result.stdout) < 2.4  # 2 busy processes for 3 s; half a CPU gives them about 1.5 s together


def test_one_file_is_capped_and_tmp_is_small(box, tmp_path):
    limits = Limits(file_size_bytes=1 << 20)
    big = box.run("head -c 3000000 /dev/zero > big; echo $?", tmp_path, limits=limits)
    assert (tmp_path / "big").stat().st_size <= 1 << 20 and big.stdout.strip() != "0"
    tmp = box.run(
        "head -c 3000000 /dev/zero > /tmp/t 2>/dev/null; echo $?; df -k /tmp | tail -1", tmp_path, limits=limits
    )
    assert tmp.stdout.split()[0] != "0" and int(tmp.stdout.split()[2]) <= 1024


def test_stdin_mounts_and_long_commands(box, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "data.txt").write_text("from the host\n")
    work = tmp_path / "work"
    work.mkdir()
    result = box.run(
        "cat -; cat /data/data.txt; touch /data/new 2>/dev/null || echo READ-ONLY",
        work,
        stdin="piped\n",
        mounts=[Mount(str(extra), "/data")],
    )
    assert result.stdout.split("\n")[:3] == ["piped", "from the host", "READ-ONLY"], result
    long = box.run("true " + "x" * (100 << 10) + "; echo long-ran", work)  # past one argument: a sourced file
    assert long.stdout.strip() == "long-ran", long


def test_a_missing_image_says_how_to_build_it(tmp_path):
    with pytest.raises(SandboxUnavailable, match="never pulls"):
        DockerSandbox(image="pivotgym/no-such-image:1").run("true", tmp_path)
    assert "make docker" in missing_image_message(BASE_IMAGE)


def test_an_unreachable_engine_is_a_sandbox_error(tmp_path, monkeypatch):
    from pivotgym.sandbox import docker as backend

    box = DockerSandbox()
    box.check()  # the image is there
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SandboxError, match="Docker engine"):
        box.run("true", tmp_path)
    assert len(leftover_containers()) == 1  # no engine to ask whether the container exists: retried at exit
    monkeypatch.delenv("DOCKER_HOST")
    backend._remove_leftovers()  # with the engine back, "no such container" settles it
    assert leftover_containers() == []


def test_a_recipe_that_fails_to_build_shows_the_log_and_leaves_no_layer():
    images = sorted(docker("images", "--all", "--quiet", "--no-trunc").stdout.split())
    recipe = ImageRecipe("test-broken", f"FROM {BASE_IMAGE}\nRUN echo step-one > /one\nRUN echo boom-here && exit 3\n")
    with pytest.raises(ImageBuildError, match="boom-here"):
        ensure_image(recipe, log=lambda _: None)
    assert sorted(docker("images", "--all", "--quiet", "--no-trunc").stdout.split()) == images  # (any order)


def test_a_recipe_is_built_once_and_found_by_its_digest(tmp_path):
    data = tmp_path / "hello.txt"
    data.write_text("hello from a recipe\n")
    recipe = ImageRecipe("test-recipe", f"FROM {BASE_IMAGE}\nCOPY hello.txt /hello.txt\n", {"hello.txt": data})
    tag = recipe.tag
    try:
        lines: list[str] = []
        assert ensure_image(recipe, log=lines.append) == tag and lines
        again: list[str] = []
        assert ensure_image(recipe, log=again.append) == tag and not again  # cached: nothing rebuilt
        out = DockerSandbox(image=tag).run("cat /hello.txt", tmp_path)
        assert out.stdout == "hello from a recipe\n"
        data.write_text("changed\n")
        assert recipe.tag != tag  # a changed file is a new recipe
    finally:
        docker("rmi", "--force", tag)


def test_the_registry_builds_the_docker_backend(tmp_path):
    assert get_sandbox("docker").run("echo hi", tmp_path).stdout == "hi\n"


class EngineLink:
    """A unix socket that forwards to the real engine's, and can be cut: the engine "dies" for its clients
    while the container it started runs on (what a crashed or restarted ``dockerd`` looks like to them)."""

    def __init__(self, path: str, engine: str = "/var/run/docker.sock") -> None:
        import socket
        import threading

        self.path, self.engine = path, engine
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(16)
        self.open: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.engine)
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        import socket

        os.unlink(self.path)  # new clients find no engine
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.server.close()
        for sock in self.open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass


def test_an_engine_lost_mid_run_is_a_sandbox_error_and_the_container_is_removed_later(tmp_path, monkeypatch):
    import threading
    import time

    from pivotgym.sandbox import docker as backend

    if not os.path.exists("/var/run/docker.sock"):
        pytest.skip("the engine is not on /var/run/docker.sock")
    before, remembered = set(running_sandbox_containers(this_process=True)), set(leftover_containers())
    link = EngineLink(str(tmp_path / "engine.sock"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{link.path}")
    box = DockerSandbox()
    threading.Timer(3.0, link.cut).start()  # the container is running its sleep by then
    started = time.monotonic()
    try:
        with pytest.raises(SandboxError, match="lost the container"):
            box.run("sleep 60", tmp_path, limits=Limits(wall_seconds=30))
        assert time.monotonic() - started < 20  # the run ends when the engine goes, not at the deadline
        lost = set(leftover_containers()) - remembered
        assert len(lost) == 1  # remembered: the engine could not be asked to remove it
        monkeypatch.delenv("DOCKER_HOST")  # the engine is back
        assert set(running_sandbox_containers(this_process=True)) - before == lost  # and it is still there
    finally:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        backend._remove_leftovers()  # what the process does at exit (and no container outlives a failure here)
    assert leftover_containers() == [] and set(running_sandbox_containers(this_process=True)) <= before
