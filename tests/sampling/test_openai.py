"""The OpenAI-compatible client against a local fake server that speaks vLLM's /v1/completions dialect.

The fake server is backed by a real HFSampler (tiny random Llama), so a round trip must reproduce exactly
what the in-process sampler returns for the same seed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pivotgym.sampling.base import SamplerError, SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.openai import OpenAISampler

CHAT = [{"role": "user", "content": "hello there"}]


class FakeServer:
    """A ThreadingHTTPServer on 127.0.0.1 answering /v1/completions and /tokenize with a real sampler."""

    def __init__(self, sampler: HFSampler, dialect: str = "vllm") -> None:
        self.sampler, self.dialect = sampler, dialect
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if self.path == "/v1/completions":
                    status, answer = owner.completions(body)
                elif self.path == "/tokenize":
                    status, answer = 200, {"tokens": owner.sampler.encode(body["messages"])}
                else:
                    status, answer = 404, {"error": f"no route {self.path}"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def completions(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("model") != "tiny":
            return 404, {"error": {"message": f"model {body.get('model')!r} not found"}}
        params = SamplingParams(
            temperature=body["temperature"],
            top_p=body["top_p"],
            top_k=body.get("top_k", 0),
            max_new_tokens=body["max_tokens"],
            stop=body.get("stop") or [],
            seed=body.get("seed"),
        )
        with self.lock:  # the tiny model is shared by the handler threads
            group = self.sampler.sample([body["prompt"]], n=body["n"], params=params)[0]
        choices = []
        for index, c in enumerate(group):
            choice: dict[str, Any] = {
                "index": index,
                "text": c.text,
                "finish_reason": c.finish_reason,
                "logprobs": {"token_logprobs": c.logprobs, "text_offset": [], "top_logprobs": []},
            }
            if self.dialect == "vllm":
                choice["token_ids"] = c.token_ids
                choice["logprobs"]["tokens"] = [f"token_id:{t}" for t in c.token_ids]
            elif self.dialect == "token_strings":  # older vLLM: ids only inside the logprobs tokens
                choice["logprobs"]["tokens"] = [f"token_id:{t}" for t in c.token_ids]
            else:  # a server with no token-id extension at all
                choice["logprobs"]["tokens"] = [self.sampler.decode([t]) for t in c.token_ids]
            choices.append(choice)
        return 200, {"id": "cmpl-1", "object": "text_completion", "model": "tiny", "choices": choices}


@pytest.fixture()
def server(tiny, request) -> Iterator[FakeServer]:
    fake = FakeServer(HFSampler(*tiny), dialect=getattr(request, "param", "vllm"))
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


def test_round_trip_matches_the_in_process_sampler(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1], api_key="secret")
    params = SamplingParams(max_new_tokens=5, seed=42, temperature=0.9)
    prompts = [CHAT, [{"role": "user", "content": "another prompt"}]]
    remote = client.sample(prompts, n=3, params=params)
    local = [HFSampler(*tiny).sample([p], n=3, params=params)[0] for p in prompts]
    for r_group, l_group in zip(remote, local):
        for r, loc in zip(r_group, l_group):
            assert (r.token_ids, r.text, r.finish_reason, r.prompt_token_ids) == (
                loc.token_ids,
                loc.text,
                loc.finish_reason,
                loc.prompt_token_ids,
            )
            assert r.logprobs == pytest.approx(loc.logprobs)
    body = server.requests[0]["body"]
    assert body["prompt"] == client.encode(prompts[0]) or body["prompt"] == client.encode(prompts[1])
    assert body["n"] == 3 and body["logprobs"] == 0 and body["return_token_ids"] is True
    assert server.requests[0]["auth"] == "Bearer secret"
    assert client.describe() == {"model": "tiny", "revision": None, "backend": "openai", "base_url": server.url}


@pytest.mark.parametrize("server", ["token_strings"], indirect=True)
def test_token_ids_recovered_from_logprob_tokens(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    params = SamplingParams(max_new_tokens=4, seed=1)
    remote = client.sample([CHAT], params=params)[0][0]
    local = HFSampler(*tiny).sample([CHAT], params=params)[0][0]
    assert remote.token_ids == local.token_ids and len(remote.logprobs) == 4


@pytest.mark.parametrize("server", ["plain"], indirect=True)
def test_server_without_token_ids_warns_and_retokenises(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    with pytest.warns(UserWarning, match="no token ids"):
        out = client.sample([CHAT], params=SamplingParams(max_new_tokens=4, seed=1))[0][0]
    assert out.token_ids == client.encode(out.text)


def test_chat_prompts_use_the_servers_tokenizer_when_none_is_local(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url)  # "tiny" is neither an alias nor a folder
    assert client.tokenizer is None
    assert client.encode(CHAT) == HFSampler(*tiny).encode(CHAT)
    assert client.encode([3, 4]) == [3, 4]
    assert server.requests[-1]["path"] == "/tokenize"


def test_errors_say_what_went_wrong(tiny, server):
    wrong_model = OpenAISampler("other", base_url=server.url, tokenizer=tiny[1])
    with pytest.raises(SamplerError, match="HTTP 404"):
        wrong_model.sample([CHAT], params=SamplingParams(max_new_tokens=2))
    server.httpd.shutdown()
    server.httpd.server_close()
    down = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1], timeout=2)
    with pytest.raises(SamplerError, match="cannot reach"):
        down.sample([CHAT], params=SamplingParams(max_new_tokens=2))
