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
        self.served = "tiny"  # the model name the server answers to (GET /v1/models lists it)
        self.finish_override: str | None = None  # e.g. "abort": every choice ends so
        self.max_model_len: int | None = None  # listed by GET /v1/models when set, as vLLM lists it
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                owner.requests.append({"path": self.path, "body": None, "auth": self.headers.get("Authorization")})
                if self.path == "/v1/models":
                    model: dict[str, Any] = {"id": owner.served, "object": "model"}
                    if owner.max_model_len:
                        model["max_model_len"] = owner.max_model_len
                    self.answer(200, {"object": "list", "data": [model]})
                else:
                    self.answer(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if self.path == "/v1/completions":
                    status, answer = owner.completions(body)
                elif self.path == "/tokenize":
                    status, answer = 200, {"tokens": owner.sampler.encode(body["messages"])}
                else:
                    status, answer = 404, {"error": f"no route {self.path}"}
                self.answer(status, answer)

            def answer(self, status: int, answer: dict[str, Any]) -> None:
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
        if body.get("model") != self.served:
            return 404, {"error": {"message": f"model {body.get('model')!r} not found"}}
        if body["temperature"] == 0 and body["n"] > 1:  # as vLLM does
            return 400, {"error": {"message": f"n must be 1 when using greedy sampling, got {body['n']}."}}
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
                "finish_reason": self.finish_override or c.finish_reason,
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
    sent = [r for r in server.requests if r["path"] == "/v1/completions"]
    body = sent[0]["body"]
    assert body["prompt"] == client.encode(prompts[0]) or body["prompt"] == client.encode(prompts[1])
    assert body["n"] == 3 and body["logprobs"] == 0 and body["return_token_ids"] is True
    assert all(r["auth"] == "Bearer secret" for r in server.requests)
    assert client.describe() == {
        "model": "tiny",
        "revision": None,
        "backend": "openai",
        "base_url": server.url,
        "dtype": None,
    }


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


def test_greedy_with_n_above_one_asks_for_one_and_repeats_it(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    params = SamplingParams(max_new_tokens=5, temperature=0.0)
    remote = client.sample([CHAT], n=3, params=params)[0]
    local = HFSampler(*tiny).sample([CHAT], n=3, params=params)[0]
    assert [c.token_ids for c in remote] == [c.token_ids for c in local]
    assert len({id(c) for c in remote}) == 3  # independent copies, not one object three times
    assert [r["body"]["n"] for r in server.requests if r["path"] == "/v1/completions"] == [1]


def test_seeds_go_one_per_request_and_match_single_prompt_calls(tiny, server):
    from pivotgym.sampling.base import sample_seeded

    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1], concurrency=4)
    assert client.prompt_seeds  # sample_seeded sends every prompt in one concurrent call
    prompts = [CHAT, [{"role": "user", "content": "another prompt"}], [{"role": "user", "content": "third"}]]
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    groups = sample_seeded(client, prompts, 2, params, [11, 12, 13])
    sent = sorted((r["body"]["seed"], r["body"]["prompt"]) for r in server.requests if r["path"] == "/v1/completions")
    assert sent == sorted(zip([11, 12, 13], [client.encode(p) for p in prompts]))
    for prompt, seed, group in zip(prompts, [11, 12, 13], groups):
        alone = HFSampler(*tiny).sample([prompt], n=2, params=SamplingParams(max_new_tokens=4, seed=seed))[0]
        assert [c.token_ids for c in group] == [c.token_ids for c in alone]
    with pytest.raises(ValueError, match="one per prompt"):
        client.sample(prompts, params=params, seeds=[1])


def test_finish_reasons_other_than_stop_and_length_are_errors(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    server.finish_override = "abort"
    out = client.sample([CHAT], params=SamplingParams(max_new_tokens=3, seed=0))[0][0]
    assert out.finish_reason == "error"


def test_the_served_name_is_found_for_a_bundled_alias_served_under_its_folder(tiny, server):
    from pivotgym.sampling.models import DEFAULT_MODEL, model_dir

    server.served = str(model_dir(DEFAULT_MODEL))  # what a server started on the folder calls the model
    client = OpenAISampler(DEFAULT_MODEL, base_url=server.url, tokenizer=tiny[1])
    client.sample([CHAT], params=SamplingParams(max_new_tokens=2, seed=0))
    assert client.served_name() == server.served
    assert [r["path"] for r in server.requests].count("/v1/models") == 1

    server.served = "something-else"
    other = OpenAISampler(DEFAULT_MODEL, base_url=server.url, tokenizer=tiny[1])
    with pytest.raises(SamplerError, match=r"HTTP 404.*serves \['something-else'\].*--served-model-name"):
        other.sample([CHAT], params=SamplingParams(max_new_tokens=2, seed=0))


def test_prompts_that_extend_others_warm_the_cache_with_their_longest_first(tiny, server):
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    turn1 = client.encode(CHAT)
    turn2 = turn1 + [28, 29, 30]  # the next turn's prompt extends the first
    other = client.encode([{"role": "user", "content": "unrelated"}])
    out = client.sample([turn1, turn2, other], n=2, params=SamplingParams(max_new_tokens=3, seed=0))
    assert [len(g) for g in out] == [2, 2, 2]
    sent = [r["body"] for r in server.requests if r["path"] == "/v1/completions"]
    assert (sent[0]["prompt"], sent[0]["max_tokens"], sent[0]["n"]) == (turn2, 1, 1)  # the host, alone, first
    assert sorted(map(len, (b["prompt"] for b in sent[1:]))) == sorted(map(len, [turn1, turn2, other]))
    plain = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1], warm_prefixes=False)
    before = len(server.requests)
    plain.sample([turn1, turn2], params=SamplingParams(max_new_tokens=2, seed=0))
    assert sum(r["path"] == "/v1/completions" for r in server.requests[before:]) == 2


def test_a_prompt_past_the_servers_window_gets_error_completions_without_a_request(tiny, server):
    """Where /v1/models lists the model's max_model_len (vLLM), a prompt that cannot fit with its new tokens is
    answered with error completions naming the cause and never sent (the server would fail the request)."""
    server.max_model_len = 40
    client = OpenAISampler("tiny", base_url=server.url, tokenizer=tiny[1])
    long_prompt, short_prompt = list(range(100, 140)), list(range(100, 110))
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    long_out, short_out = client.sample([long_prompt, short_prompt], n=2, params=params, seeds=[1, 2])
    assert [c.finish_reason for c in long_out] == ["error", "error"]
    assert long_out[0].text.startswith("context_window: the prompt has 40 tokens")
    assert all(c.finish_reason in ("stop", "length") for c in short_out)
    sent = [r["body"]["prompt"] for r in server.requests if r["path"] == "/v1/completions"]
    assert long_prompt not in sent and short_prompt in sent
    assert short_out == client.sample([short_prompt], n=2, params=params, seeds=[2])[0:1][0]  # as if alone
