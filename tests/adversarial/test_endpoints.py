"""An endpoint that misbehaves: it echoes the API key in its errors, it is dead, its address is not a URL or
carries credentials, its Retry-After is nan, negative or huge; settings that name a secret. The key reaches
no file and no terminal; a dead endpoint says what it is doing; a bad address is a configuration error."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.inspect import main as inspect
from agent.loop.config import OpenAIConfig
from agent.loop.policies import openai_policy
from agent.loop.policies.openai_policy import OpenAIPolicy
from agent.loop.records import Message
from agent.solve import main as solve
from tests.adversarial.helpers import fill_ok
from tests.agent.openai_server import Behaviour, OpenAIServer, Recorder

KEY_ENV = "PTXBENCH_ADVERSARIAL_KEY"
KEY = "sk-adversarial-0123456789abcdef0123456789abcdef"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with OpenAIServer() as s:
        yield s


def endpoint_args(base_url: str, runs_dir: Path, run_id: str, *extra: str) -> list[str]:
    return ["task=gemm", "arch=sm_90a", "llm.model=m", f"llm.base_url={base_url}", f"llm.api_key_env={KEY_ENV}",
            "llm.backoff_s=0.01", "eval.gpu=false", f"runs_dir={runs_dir}", f"run_id={run_id}", *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "code", "key"),
    [(401, 2, KEY), (500, 1, KEY), (500, 1, "plain-secret-value-0123456789")],  # the last looks like nothing
)
def test_an_echoed_key_reaches_no_file_and_no_terminal(
    status: int, code: int, key: str, server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, key)
    server.default = Behaviour(status=status, echo_authorization=True)
    assert solve(endpoint_args(server.base_url, runs_dir, "echo", "llm.retries=1")) == code
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {key}"  # the server did see it
    out, err = capsys.readouterr()
    assert f"HTTP {status}" in err and "[redacted]" in err
    leaks = [p for p in runs_dir.rglob("*") if p.is_file() and key[:12].encode() in p.read_bytes()]
    assert leaks == [] and key[:12] not in out + err  # not the key, nor a piece of it


def test_a_dead_endpoint_says_each_retry_and_its_wait(runs_dir: Path, capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, KEY)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert solve(endpoint_args(f"http://127.0.0.1:{port}/v1", runs_dir, "dead", "llm.retries=2")) == 1
    err = capsys.readouterr().err
    assert "turn 1: connection failed" in err
    assert "retry 1 of 2 in 0.0 s" in err and "retry 2 of 2 in 0.0 s" in err
    assert "gave up after 3 tries" in err


@pytest.mark.parametrize("url", ["notaurl", "file:///etc/passwd", "http://", "http://host:99999/v1"])
def test_a_malformed_base_url_is_a_configuration_error(
    url: str, runs_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    assert solve(endpoint_args(url, runs_dir, "badurl")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid settings:") and "llm.base_url" in err
    assert not runs_dir.exists()


@pytest.mark.parametrize(
    ("header", "waited"),
    [("nan", 0.01), ("-5", 0.01), ("inf", 0.01), ("soon", 0.01), ("1e12", openai_policy.MAX_WAIT_S), ("0.5", 0.5)],
)
def test_retry_after_is_used_only_when_usable(
    header: str, waited: float, server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(openai_policy.time, "sleep", waits.append)
    server.script.extend([Behaviour(status=429, headers={"retry-after": header}), Behaviour(content="done")])
    config = OpenAIConfig(base_url=server.base_url, model="m", api_key_env=KEY_ENV, backoff_s=0.01, retries=2)
    reply = OpenAIPolicy(config, Recorder()).respond([Message(role="user", content="hi")], turn=1)
    assert reply.text == "done" and waits == [waited]


PASSWORD, QUERY_KEY = "pw-in-the-url-0123456789", "query-key-0123456789abcdef"


def test_credentials_in_the_base_url_reach_no_file_page_or_terminal(
    server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    server.script.extend([Behaviour(content=fill_ok()), Behaviour(status=500)])
    url = server.base_url.replace("http://", f"http://user:{PASSWORD}@") + f"?api_key={QUERY_KEY}&v=1"
    args = endpoint_args(url, runs_dir, "creds", "max_turns=2", "unverified_turns=2", "llm.retries=0")
    assert solve(args) == 1  # the second turn's 500 stops the run: its detail names the endpoint too
    assert QUERY_KEY in server.requests[0]["path"]  # the credentials were used, not dropped
    assert inspect([str(runs_dir / "creds")]) == 0
    out, err = capsys.readouterr()
    for secret in (PASSWORD, QUERY_KEY):
        leaks = [p for p in runs_dir.rglob("*") if p.is_file() and secret[:10].encode() in p.read_bytes()]
        assert leaks == [] and secret[:10] not in out + err
    config = json.loads((runs_dir / "creds" / "config.json").read_text())
    assert config["llm"]["base_url"].startswith("http://REDACTED@127.0.0.1:") and "api_key=REDACTED&v=1" in err
    assert "api_key=REDACTED&v=1" in config["llm"]["base_url"]


def test_a_resume_asks_again_for_credentials_it_did_not_keep(
    server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    server.default = Behaviour(content=fill_ok())
    url = server.base_url.replace("http://", f"http://user:{PASSWORD}@")
    assert solve(endpoint_args(url, runs_dir, "again", "max_turns=1", "unverified_turns=1")) == 0
    capsys.readouterr()
    assert solve(["resume=again", f"runs_dir={runs_dir}", "max_turns=2", "unverified_turns=2"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: ") and "llm.base_url held credentials, which are never written down" in line
    assert solve(["resume=again", f"runs_dir={runs_dir}", "max_turns=2", "unverified_turns=2",
                  f"llm.base_url={url}"]) == 0  # fmt: skip
    assert len(server.requests) == 2


SECRET_SETTINGS = {
    "toml": ('[llm]\nmodel = "m"\n[llm.extra]\napi_key = "sk-in-a-file-0123456789"\n', [], "llm.extra.api_key"),
    "toml_deep": (
        '[llm]\nmodel = "m"\n[llm.extra.headers.x]\nauthorization = "Bearer abcdefghijk"\n',
        [],
        "llm.extra.headers.x.authorization",
    ),
    "command_line": ("", ["llm.extra.api_key=sk-on-the-line-0123456789"], "llm.extra.api_key"),
    "command_line_json": ("", ['llm.extra={"a": [{"client_secret": "s3cr3t-value"}]}'], "llm.extra.a.0.client_secret"),
}


@pytest.mark.parametrize("case", SECRET_SETTINGS)
def test_a_secret_named_setting_is_refused_at_any_depth(
    case: str, runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    toml, words, name = SECRET_SETTINGS[case]
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.chdir(tmp_path)
    if toml:
        (tmp_path / "ptxbench.toml").write_text(toml)
    args = ["task=gemm", "arch=sm_90a", "llm.model=m", f"llm.api_key_env={KEY_ENV}", f"runs_dir={runs_dir}", *words]
    assert solve(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and f"{name} is refused: the API key is read only from the environment" in line
    assert not runs_dir.exists()


def test_the_inspector_shows_no_credentials_an_older_run_folder_holds(
    runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    assert solve(["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", "max_turns=1",
                  "eval.gpu=false", f"runs_dir={runs_dir}", "run_id=old"]) == 0  # fmt: skip
    config_path = runs_dir / "old" / "config.json"
    config = json.loads(config_path.read_text())
    url = f"http://user:{PASSWORD}@127.0.0.1:9/v1?api_key={QUERY_KEY}"
    config["policy"], config["llm"]["base_url"] = f"openai m at {url}", url  # as written before redaction
    config_path.write_text(json.dumps(config))
    assert inspect([str(runs_dir / "old"), f"out={tmp_path / 'site'}"]) == 0
    pages = "".join(p.read_text() for p in (tmp_path / "site").rglob("*.html"))
    assert "REDACTED@127.0.0.1:9" in pages and PASSWORD[:10] not in pages and QUERY_KEY[:10] not in pages
