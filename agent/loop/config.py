"""Settings of one repair-loop run: the models, each field documented where it is declared, and the policy
registry (`POLICIES`) from which `llm=`'s names, its help and what a resumed run may change all derive. How a
command line becomes these settings is agent/loop/command_line.py's.

Secrets never live here: the OpenAI policy names the environment variable that holds its key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.cli import ConfigError
from agent.loop.prompts import PARTS, parse_prompt, prompt_name
from agent.loop.redact import secret_key
from agent.notes.record import read_notes
from tasks.catalog import get_task
from tasks.schema import Arch
from tools import jsontext
from tools.options import MAX_WAIT_S, EvalOptions
from tools.pool.base import LOCAL, scheduler_address

if TYPE_CHECKING:
    from agent.loop.journal import Journal
    from agent.loop.policies.base import Policy
    from tasks.schema import Task

History = Literal["full", "last", "digest"]
Mode = Literal["turns", "tools"]
# Where llm=openai's model and base URL come from when the command line does not say (agent/loop/command_line.py
# reads them); the key comes only ever from the environment.
MODEL_ENV, BASE_URL_ENV, KEY_ENV = "PTXBENCH_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"
CONFIG_FILE = "ptxbench.toml"
# Upper bounds of the loop's own counts (the time ones are tools/options.py's MAX_WAIT_S): far past real use.
MAX_RETRIES = 100
MAX_TURNS = 1000


class PolicyConfig(BaseModel):
    """A policy's settings. A subclass is the whole of a policy's entry: `name` (a Literal: the llm= value),
    its documented fields, `resumable` and `policy`; listed in POLICIES, it is on the command line, in the help
    and in the runs' records."""

    model_config = ConfigDict(extra="forbid")
    # Settings a resumed run may change: how to reach the policy, never who answers.
    resumable: ClassVar[tuple[str, ...]] = ()

    def policy(self, task: Task, arch: Arch, runs_dir: Path, journal: Journal) -> Policy:
        """The policy these settings describe; ConfigError when it cannot work (no key, no reference, bad fixture)."""
        raise NotImplementedError


class OpenAIConfig(PolicyConfig):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, …)."""

    name: Literal["openai"] = "openai"
    base_url: str = Field("https://api.openai.com/v1", description="The endpoint, up to and including /v1.")
    model: str | None = Field(
        None, description=f"Model name as the endpoint knows it (required: here, in ${MODEL_ENV} or ./{CONFIG_FILE})."
    )
    api_key_env: str = Field(KEY_ENV, description="Environment variable holding the API key.")
    temperature: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Sampling temperature; unset: the server's default."
    )
    max_tokens: int | None = Field(
        32768, ge=1, description="Output tokens per answer (sent as max_completion_tokens); null: unset."
    )
    context_tokens: int | None = Field(
        None,
        ge=1,
        description="The model's context window (prompt + answer), in tokens as tiktoken's cl100k counts them; set, "
        "the loop lowers max_tokens to fit and then compacts older attempts. Null: no limit known.",
    )
    min_output_tokens: int = Field(
        4096, ge=1, description="The fewest output tokens the context guard leaves an answer before it compacts."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Extra request fields, sent as given: llm.extra.top_p=0.95, or a JSON object."
    )
    timeout_s: float = Field(
        900.0, gt=0, le=MAX_WAIT_S, allow_inf_nan=False,
        description="Seconds one request may take before it is retried.",
    )  # fmt: skip
    retries: int = Field(
        6, ge=0, le=MAX_RETRIES, description="Retries after a 408/409/429/5xx, a time-out or a garbled reply."
    )
    backoff_s: float = Field(
        2.0, ge=0, le=MAX_WAIT_S, allow_inf_nan=False,
        description="First wait before a retry; doubles each time, at most 60 s.",
    )  # fmt: skip
    resumable: ClassVar[tuple[str, ...]] = (
        "base_url", "api_key_env", "timeout_s", "retries", "backoff_s", "context_tokens", "min_output_tokens",
    )  # fmt: skip

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """Refused here, not found out as a "connection failed" after every retry."""
        try:
            url = urlsplit(value)
            url.port  # noqa: B018  # reading it checks the port
        except ValueError as e:
            raise ValueError(f"{value!r} is not a URL ({e})") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
        return value

    @field_validator("extra", mode="before")
    @classmethod
    def _json_values(cls, value: Any) -> Any:
        """Command-line values are strings: read the whole object, or each value, as JSON where it parses."""
        if isinstance(value, str):
            try:
                value = jsontext.loads(value)
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, dict):
            raise ValueError("llm.extra must be a JSON object")
        value = {k: _maybe_json(v) for k, v in value.items()}
        secret = secret_key(value, "llm.extra")
        if secret:
            raise ValueError(
                f"{secret} is refused: the API key is read only from the environment (${KEY_ENV}, or "
                "the variable llm.api_key_env names), never from settings that are written down"
            )
        if value.get("stream"):  # the reply would come as server-sent events, which no retry can read
            raise ValueError("llm.extra.stream=true is refused: the loop reads each reply whole, as one chat "
                             "completion; leave stream unset")  # fmt: skip
        return value

    def policy(self, task: Task, arch: Arch, runs_dir: Path, journal: Journal) -> Policy:
        from agent.loop.policies.openai_policy import OpenAIPolicy  # the openai client only when it is used

        if not self.model:
            raise ConfigError(no_endpoint_message())
        return OpenAIPolicy(self, journal)


def no_endpoint_message() -> str:
    """What to do when llm=openai has no model: the three ways to name an endpoint, and the offline policies."""
    return (
        "llm=openai needs a model: name it on the command line (llm.model=NAME llm.base_url=URL), in the environment "
        f"(${MODEL_ENV}, ${BASE_URL_ENV}, and the key in ${KEY_ENV}), or in ./{CONFIG_FILE} ([llm] model = "
        '"NAME", base_url = "URL"; never the key, which is read only from the environment). To try the loop '
        "offline: llm=reference (the task's reference solution) or llm=scripted "
        "llm.path=tests/fixtures/agent/three_turns.json"
    )


class ReferenceConfig(PolicyConfig):
    """Answers with the task's reference solution (tasks/solutions), once."""

    name: Literal["reference"] = "reference"

    def policy(self, task: Task, arch: Arch, runs_dir: Path, journal: Journal) -> Policy:
        from agent.loop.policies.offline import ReferencePolicy

        return ReferencePolicy(task, arch)


class ScriptedConfig(PolicyConfig):
    """Answers from a fixture file, one per turn, for tests and demos."""

    name: Literal["scripted"] = "scripted"
    path: Path = Field(description="JSON file: a list of answers (see agent/loop/policies/offline.py).")
    label: str | None = Field(None, description="The model whose answers these are, named in reports and run pages.")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """Recorded absolute, so a resumed run finds the file from any working directory."""
        return value.resolve()

    def policy(self, task: Task, arch: Arch, runs_dir: Path, journal: Journal) -> Policy:
        from agent.loop.policies.offline import ScriptedPolicy

        return ScriptedPolicy(self.path, self.label, task, arch)


class ReplayConfig(PolicyConfig):
    """Re-drives a recorded run's answers, turn by turn, through today's harness."""

    name: Literal["replay"] = "replay"
    run: str = Field(description="The recorded run: its folder, or its id under runs_dir.")
    label: str | None = Field(None, description="The model whose answers these are, named in reports and run pages.")

    def policy(self, task: Task, arch: Arch, runs_dir: Path, journal: Journal) -> Policy:
        from agent.loop.policies.offline import ReplayPolicy

        return ReplayPolicy(self.run, runs_dir, task, arch, self.label)


# The policies by kind, as mini-swe-agent's name → class table: llm=NAME picks one; the first is the default.
POLICIES: tuple[type[PolicyConfig], ...] = (OpenAIConfig, ReferenceConfig, ScriptedConfig, ReplayConfig)
POLICY_NAMES = tuple(p.model_fields["name"].default for p in POLICIES)
LLMConfig = Annotated[Union[POLICIES], Field(discriminator="name")]  # noqa: UP007  # a union built from the table


def _maybe_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return jsontext.loads(value)  # refuses what would crash json (nesting, huge numbers, inf)
    except json.JSONDecodeError:
        return value


def _pool_address(value: str) -> str:
    scheduler_address(value)  # refuses what it cannot read, saying what it accepts
    return value


PoolSetting = Annotated[
    str,
    AfterValidator(_pool_address),
    Field(
        description="Where the GPU stages run: local (this machine's GPUs), or a Dask scheduler whose workers run "
        "python -m tools.gpu.dask_worker on GPU hosts: dask://HOST:PORT, tls://HOST:PORT."
    ),
]


class EvalConfig(EvalOptions):
    """How hard each attempt is evaluated (tools/options.py), and on which GPU."""

    gpu: bool = Field(True, description="Run the GPU stages when a GPU of the arch is here; false: static only.")
    device: int = Field(0, ge=0, description="CUDA device index.")
    pool: PoolSetting = LOCAL

    def options(self, target_speedup: float) -> EvalOptions:
        """The harness's part of these settings; profile=auto's bar is the run's target unless set."""
        # The settings given, not every field: under criterion=paper an unset `trials` is the paper's count.
        given = self.model_dump(include=set(EvalOptions.model_fields), exclude_unset=True)
        options = EvalOptions.model_validate(given)
        if options.perf_below is None:
            options = options.model_copy(update={"perf_below": target_speedup})
        return options


class SeedConfig(BaseModel):
    """Opens the conversation with a recorded attempt, e.g. another model's failure for a teacher to repair.

    The run's system and task prompts are the recorded run's, then come the attempt as the first answer and
    its feedback; the policy answers from there (agent.mine_repairs builds SFT data this way)."""

    model_config = ConfigDict(extra="forbid")
    run: str = Field(description="The recorded run: its folder, or its id under runs_dir.", examples=["RUN"])
    turn: int = Field(
        ge=1, description="The recorded turn whose answer and feedback open the conversation.", examples=[2]
    )


class FeedbackConfig(BaseModel):
    """What the feedback of an attempt adds to the harness's report: repair notes (python -m agent.mine_notes)."""

    model_config = ConfigDict(extra="forbid")
    notes: Path | None = Field(
        None, description="A notes file (NOTES.jsonl): a failed attempt's feedback shows the best-matching notes."
    )
    notes_k: int = Field(3, ge=1, description="Notes shown at most per attempt.")
    notes_exclude_task: bool = Field(True, description="Never show notes mined from this task's own runs.")

    @field_validator("notes")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        """Read now, so a bad file is refused before the run starts; recorded absolute, for a resumed run."""
        if value is not None:
            read_notes(value)
        return value.resolve() if value is not None else None


class SolveConfig(BaseModel):
    """One run: a task on an arch, a policy, and the limits that end the loop."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(description="Task name or alias (python -m tasks lists them).")
    arch: Arch = Field(description="sm_90a or sm_100a (aliases: sm_90, h100, h200, sm_100, b200).")
    llm: LLMConfig = Field(
        default_factory=POLICIES[0], title="policy", description=f"The policy: {', '.join(POLICY_NAMES)}."
    )
    mode: Mode = Field(
        "turns",
        description="turns: one answer per turn, the harness's feedback after each; tools: the model calls the "
        "harness as function tools (compile, evaluate, profile, sanitize, task, submit) until it submits.",
    )
    max_turns: int = Field(8, ge=1, le=MAX_TURNS, description="Turns at most (mode=turns).")
    max_tool_calls: int = Field(
        40, ge=1, le=MAX_TURNS, description="Tool calls at most (mode=tools), refused ones counted."
    )
    max_evaluations: int = Field(
        8, ge=1, le=MAX_TURNS,
        description="GPU evaluations at most (mode=tools: evaluate, profile, sanitize; a submit is always evaluated).",
    )  # fmt: skip
    history: History = Field(
        "full",
        description="What the model sees of earlier turns: all of them, only the last, or the last in full and "
        "each earlier one as a line (status, key error, speedup).",
    )
    prompt: str = Field(
        "full",
        description="The knowledge pack in the system prompt: full (the base document and every pattern document), "
        f"base, none, or a comma list of parts ({', '.join(PARTS)}).",
    )
    target_speedup: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="Stop once a correct attempt with its targets is this fast."
    )
    unverified_turns: int = Field(
        1, ge=1, le=MAX_TURNS,
        description="Unverified attempts (compiled, never run: no GPU of the arch) after which the run ends.",
    )  # fmt: skip
    max_tokens_total: int | None = Field(None, ge=1, description="Token budget (prompt + completion) of the run.")
    max_wall_s: float | None = Field(
        None, gt=0, le=MAX_WAIT_S, allow_inf_nan=False,
        description="Time budget: seconds of model and evaluation time.",
    )  # fmt: skip
    runs_dir: Path = Field(Path("runs"), description="Where run folders go.")
    run_id: str | None = Field(None, description="The new run's id (default: time, task, arch, random suffix).")
    eval: EvalConfig = Field(default_factory=EvalConfig)
    seed: SeedConfig | None = Field(None, description="Start from a recorded attempt (seed.run, seed.turn).")
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        """Refused here, naming the catalog's tasks; a run records the canonical name (agent/loop/run.py)."""
        get_task(value)
        return value

    @field_validator("arch", mode="before")
    @classmethod
    def _resolve_arch(cls, value: Any) -> Any:
        return Arch.resolve(value) if isinstance(value, str) else value

    @field_validator("prompt")
    @classmethod
    def _known_parts(cls, value: str) -> str:
        """Recorded in one spelling (full, base, none, or the parts in the pack's order), so variants compare."""
        return prompt_name(parse_prompt(value))

    @model_validator(mode="after")
    def _tools_unseeded(self) -> SolveConfig:
        """A seed opens a turns conversation (an answer and its feedback), which a tools run does not hold."""
        if self.mode == "tools" and self.seed is not None:
            raise ValueError("seed.run opens a turns-mode conversation; mode=tools starts from the task alone")
        return self


# How a run reaches its policy and the GPUs: what a continued bench, or mining again, may change.
ENDPOINT_KEYS = tuple(sorted({*(f"llm.{key}" for p in POLICIES for key in p.resumable), "eval.pool"}))
# Keys a resumed run may change: its limits and how to reach the endpoint and the GPUs, never what it is solving.
RESUMABLE = frozenset({
    "max_turns", "max_tokens_total", "max_wall_s", "unverified_turns", "runs_dir", *ENDPOINT_KEYS,
    "max_tool_calls", "max_evaluations",
    "eval.device", "eval.timeout_s", "eval.static_timeout_s",
})  # fmt: skip


def setting_default(name: str) -> Any:
    """A run setting's default, for the records and commands that use it without a SolveConfig."""
    return SolveConfig.model_fields[name].get_default(call_default_factory=True)
