"""Settings of one repair-loop run, and how `key=value` words become them (agent/cli.py reads the words).

Every field is documented where it is declared; `python -m agent.solve help` prints them. Secrets never
live here: the OpenAI policy names the environment variable that holds its key.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.cli import ConfigError, check_keys, described
from agent.loop.prompts import PARTS, parse_prompt, prompt_name
from tasks.schema import Arch
from tools.answer import format_validation_error
from tools.options import EvalOptions
from tools.pool.base import LOCAL, scheduler_address


class OpenAIConfig(BaseModel):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, …)."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["openai"] = "openai"
    base_url: str = Field("https://api.openai.com/v1", description="The endpoint, up to and including /v1.")
    model: str | None = Field(
        None, description="Model name as the endpoint knows it (required: here, in $PTXBENCH_MODEL or ./ptxbench.toml)."
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature; unset: the server's default.")
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
        900.0, gt=0, allow_inf_nan=False, description="Seconds one request may take before it is retried."
    )
    retries: int = Field(6, ge=0, description="Retries after a 408/409/429/5xx, a time-out or a garbled reply.")
    backoff_s: float = Field(
        2.0, ge=0, allow_inf_nan=False, description="First wait before a retry; doubles each time, at most 60 s."
    )

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
                value = json.loads(value)
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, dict):
            raise ValueError("llm.extra must be a JSON object")
        return {k: _maybe_json(v) for k, v in value.items()}


class ReferenceConfig(BaseModel):
    """Answers with the task's reference solution (tasks/solutions), once."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["reference"] = "reference"


class ScriptedConfig(BaseModel):
    """Answers from a fixture file, one per turn, for tests and demos."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["scripted"] = "scripted"
    path: Path = Field(description="JSON file: a list of answers (see agent/policies/offline.py).")
    label: str | None = Field(None, description="The model whose answers these are, named in reports and run pages.")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """Recorded absolute, so a resumed run finds the file from any working directory."""
        return value.resolve()


class ReplayConfig(BaseModel):
    """Re-drives a recorded run's answers, turn by turn, through today's harness."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["replay"] = "replay"
    run: str = Field(description="The recorded run: its folder, or its id under runs_dir.")
    label: str | None = Field(None, description="The model whose answers these are, named in reports and run pages.")


LLMConfig = Annotated[OpenAIConfig | ReferenceConfig | ScriptedConfig | ReplayConfig, Field(discriminator="name")]
POLICY_CONFIGS: dict[str, type[BaseModel]] = {
    "openai": OpenAIConfig, "reference": ReferenceConfig, "scripted": ScriptedConfig, "replay": ReplayConfig,
}  # fmt: skip
POLICY_NAMES = tuple(POLICY_CONFIGS)


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
        options = EvalOptions.model_validate(self.model_dump(include=set(EvalOptions.model_fields)))
        if options.perf_below is None:
            options = options.model_copy(update={"perf_below": target_speedup})
        return options


class SeedConfig(BaseModel):
    """Opens the conversation with a recorded attempt, e.g. another model's failure for a teacher to repair.

    The run's system and task prompts are the recorded run's, then come the attempt as the first answer and
    its feedback; the policy answers from there (agent.mine_repairs builds SFT data this way)."""

    model_config = ConfigDict(extra="forbid")
    run: str = Field(description="The recorded run: its folder, or its id under runs_dir.")
    turn: int = Field(ge=1, description="The recorded turn whose answer and feedback open the conversation.")


class SolveConfig(BaseModel):
    """One run: a task on an arch, a policy, and the limits that end the loop."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(description="Task name or alias (python -m tasks lists them).")
    arch: Arch = Field(description="sm_90a or sm_100a (aliases: sm_90, h100, h200, sm_100, b200).")
    llm: LLMConfig = Field(default_factory=OpenAIConfig, description="The policy: openai, reference, scripted, replay.")
    max_turns: int = Field(8, ge=1, description="Turns at most.")
    history: Literal["full", "last", "digest"] = Field(
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
        1, ge=1, description="Unverified attempts (compiled, never run: no GPU of the arch) after which the run ends."
    )
    max_tokens_total: int | None = Field(None, ge=1, description="Token budget (prompt + completion) of the run.")
    max_wall_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Time budget: seconds of model and evaluation time."
    )
    runs_dir: Path = Field(Path("runs"), description="Where run folders go.")
    run_id: str | None = Field(None, description="The new run's id (default: time, task, arch, random suffix).")
    eval: EvalConfig = Field(default_factory=EvalConfig)
    seed: SeedConfig | None = Field(None, description="Start from a recorded attempt (seed.run, seed.turn).")

    @field_validator("arch", mode="before")
    @classmethod
    def _resolve_arch(cls, value: Any) -> Any:
        return Arch.resolve(value) if isinstance(value, str) else value

    @field_validator("prompt")
    @classmethod
    def _known_parts(cls, value: str) -> str:
        """Recorded in one spelling (full, base, none, or the parts in the pack's order), so variants compare."""
        return prompt_name(parse_prompt(value))


# Keys a resumed run may change: its limits and how to reach the endpoint and the GPUs, never what it is solving.
RESUMABLE = {
    "max_turns", "max_tokens_total", "max_wall_s", "unverified_turns", "runs_dir",
    "llm.base_url", "llm.api_key_env", "llm.timeout_s", "llm.retries", "llm.backoff_s", "llm.context_tokens",
    "llm.min_output_tokens", "eval.device", "eval.pool", "eval.timeout_s", "eval.static_timeout_s",
}  # fmt: skip
# Where an endpoint comes from when the command line does not say (the key: only ever the environment).
MODEL_ENV, BASE_URL_ENV = "PTXBENCH_MODEL", "OPENAI_BASE_URL"
CONFIG_FILE = "ptxbench.toml"
_SECRET = re.compile(r"(?:^|_)key$|^(?:api_)?token$|secret|password|authorization", re.I)


def no_endpoint_message() -> str:
    """What to do when llm=openai has no model: the three ways to name an endpoint, and the offline policies."""
    return (
        "llm=openai needs a model: name it on the command line (llm.model=NAME llm.base_url=URL), in the environment "
        f"(${MODEL_ENV}, ${BASE_URL_ENV}, and the key in $OPENAI_API_KEY), or in ./{CONFIG_FILE} ([llm] model = "
        '"NAME", base_url = "URL"; never the key, which is read only from the environment). To try the loop '
        "offline: llm=reference (the task's reference solution) or llm=scripted "
        "llm.path=tests/fixtures/agent/three_turns.json"
    )


def require_endpoint(settings: SolveConfig) -> SolveConfig:
    """`settings`, or ConfigError saying how to name an endpoint when llm=openai has no model."""
    if isinstance(settings.llm, OpenAIConfig) and not settings.llm.model:
        raise ConfigError(no_endpoint_message())
    return settings


def endpoint_settings(pairs: dict[str, str], environ: Mapping[str, str], folder: Path) -> dict[str, str]:
    """`pairs` with the llm=openai settings it lacks taken from the environment ($PTXBENCH_MODEL,
    $OPENAI_BASE_URL), then from ./ptxbench.toml's [llm] table: the command line wins, then the environment."""
    if pairs.get("llm", "openai") != "openai":
        return pairs
    from_env = {key: environ[var] for key, var in (("llm.model", MODEL_ENV), ("llm.base_url", BASE_URL_ENV))
                if environ.get(var)}  # fmt: skip
    return {**_config_file(folder / CONFIG_FILE), **from_env, **pairs}


def _config_file(path: Path) -> dict[str, str]:
    """The [llm] settings of ptxbench.toml as key=value settings; ConfigError naming the file for anything else."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not a TOML file we can read ({e})") from None
    unknown = sorted(set(data) - {"llm"})
    llm = data.get("llm", {})
    if unknown or not isinstance(llm, dict):
        raise ConfigError(f"{path}: only an [llm] table is read here (found {', '.join(unknown) or 'llm = …'})")
    out = {}
    for key, value in llm.items():
        if _SECRET.search(key):
            raise ConfigError(f"{path}: llm.{key} is refused: the API key is read only from the environment "
                              f"(${OpenAIConfig.model_fields['api_key_env'].default}, or the variable llm.api_key_env "
                              "names), never from a file")  # fmt: skip
        if key not in OpenAIConfig.model_fields or key == "name":
            known = ", ".join(k for k in OpenAIConfig.model_fields if k != "name")
            raise ConfigError(f"{path}: unknown setting llm.{key} (known: {known})")
        out[f"llm.{key}"] = json.dumps(value) if isinstance(value, dict | list | bool) else str(value)
    return out


def _maybe_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def nest(pairs: dict[str, str]) -> dict[str, Any]:
    """{'llm': 'openai', 'llm.model': 'x'} → {'llm': {'name': 'openai', 'model': 'x'}}, keys checked."""
    tree: dict[str, Any] = {}
    for key, value in pairs.items():
        head, *rest = key.split(".")
        check_keys([head], SolveConfig.model_fields)
        if head == "llm" and not rest:
            if value not in POLICY_NAMES:
                raise ConfigError(f"unknown policy llm={value!r}; known: {', '.join(POLICY_NAMES)}")
            tree.setdefault("llm", {})["name"] = value
            continue
        if not rest:
            if head == "eval":
                raise ConfigError("eval takes sub-keys, e.g. eval.trials=1")
            if head == "seed":
                raise ConfigError("seed takes sub-keys, e.g. seed.run=RUN seed.turn=2")
            tree[head] = None if value == "null" else value
            continue
        if head not in ("llm", "eval", "seed"):
            raise ConfigError(f"{head} has no sub-keys (got {key})")
        node = tree.setdefault(head, {})
        for part in rest[:-1]:
            node = node.setdefault(part, {})
        node[rest[-1]] = None if value == "null" else value
    return tree


def _check_llm_keys(llm: dict[str, Any]) -> None:
    fields = POLICY_CONFIGS[llm.get("name", "openai")].model_fields
    for key in llm:
        if key not in fields:
            known = ", ".join(f"llm.{k}" for k in fields if k != "name") or "none"
            raise ConfigError(f"llm={llm.get('name', 'openai')} has no setting llm.{key} (its settings: {known})")


def build_config(tree: dict[str, Any]) -> SolveConfig:
    """A validated SolveConfig, or ConfigError with one line per problem."""
    if "task" not in tree or "arch" not in tree:
        missing = " and ".join(k for k in ("task", "arch") if k not in tree)
        raise ConfigError(f"{missing} required, e.g. task=gemm arch=sm_90a")
    if isinstance(tree.get("llm"), dict):
        tree = {**tree, "llm": {"name": "openai", **tree["llm"]}}  # llm.model=… alone means llm=openai
        _check_llm_keys(tree["llm"])
    check_keys(tree.get("eval") or {}, EvalConfig.model_fields, "eval.")
    check_keys(tree.get("seed") or {}, SeedConfig.model_fields, "seed.")
    try:
        return SolveConfig.model_validate(tree)
    except ValidationError as e:
        # pydantic names the policy's union branch in paths (llm.openai.model); users write llm.model.
        lines = re.sub(r"\bllm\.(?:openai|reference|scripted|replay)\b", "llm", format_validation_error(e))
        raise ConfigError("invalid settings:\n" + lines) from None
    except ValueError as e:  # Arch.resolve's UnknownName
        raise ConfigError(str(e)) from None


def merge(tree: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` laid over `tree`, nested dicts merged key by key."""
    out = dict(tree)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def usage() -> str:
    lines = [
        "usage: python -m agent.solve task=T arch=A [llm=openai|reference|scripted|replay] [key=value ...]",
        "       python -m agent.solve resume=RUN_ID [runs_dir=DIR] [max_turns=N ...]",
        "",
        "settings (null unsets an optional one):",
        *described(SolveConfig, "", skip=("llm", "eval", "seed")),
    ]
    for name, model in POLICY_CONFIGS.items():
        lines += [f"llm={name}: {model.__doc__.strip()}", *described(model, "llm.", skip=("name",))]
    lines += [f"eval: {EvalConfig.__doc__.strip()}", *described(EvalConfig, "eval.")]
    lines += [f"seed: {SeedConfig.__doc__.strip().splitlines()[0]}", *described(SeedConfig, "seed.")]
    lines += [
        "",
        f"llm=openai's model and base URL may also come from ${MODEL_ENV} and ${BASE_URL_ENV}, or from an [llm] table "
        f"in ./{CONFIG_FILE} (never the key: ${OpenAIConfig.model_fields['api_key_env'].default} only).",
        "A resumed run (resume=RUN_ID) may change only: " + ", ".join(sorted(RESUMABLE)) + ".",
        "Exit status: 0 the run finished (whatever the model achieved); 1 it stopped early on an error",
        "(resume it); 2 usage or configuration error; 130 interrupted.",
    ]
    return "\n".join(lines)
