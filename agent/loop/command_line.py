"""agent.solve's settings as people give them: `key=value` words (agent/cli.py reads them), with llm=openai's
model and base URL from the environment or ./ptxbench.toml where the words name none, and the help text.
agent.solve, agent.bench and agent.mine_repairs read their run settings here, once; the library gets a
SolveConfig.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent import cli
from agent.cli import ConfigError
from agent.loop.config import (
    BASE_URL_ENV,
    CONFIG_FILE,
    KEY_ENV,
    MODEL_ENV,
    POLICY_NAMES,
    RESUMABLE,
    OpenAIConfig,
    SolveConfig,
)
from agent.loop.redact import secret_key
from agent.loop.run import Prepared, prepare, resume


def from_command_line(argv: list[str], quiet: bool = False) -> Prepared:
    """`python -m agent.solve ARGV`'s run, prepared: a new one, or `resume=RUN_ID`'s."""
    pairs = cli.parse_pairs(argv)
    if "resume" in pairs:
        return resume(pairs.pop("resume"), pairs, quiet)
    return prepare(solve_settings(pairs), quiet)


def solve_settings(pairs: Mapping[str, Any]) -> SolveConfig:
    """A new run's settings from `pairs` (dotted keys; values as typed, or typed values), the endpoint filled in
    from the environment or ./ptxbench.toml; ConfigError for anything missing, unknown or invalid."""
    missing = [key for key in ("task", "arch") if key not in pairs]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} required, e.g. task=gemm arch=sm_90a")
    return cli.validated(SolveConfig, cli.tree(SolveConfig, endpoint_settings(pairs, os.environ, Path.cwd())))


def endpoint_settings(pairs: Mapping[str, Any], environ: Mapping[str, str], folder: Path) -> dict[str, Any]:
    """`pairs` with the llm=openai settings it lacks taken from the environment ($PTXBENCH_MODEL,
    $OPENAI_BASE_URL), then from ./ptxbench.toml's [llm] table: the command line wins, then the environment."""
    if pairs.get("llm", "openai") != "openai":
        return dict(pairs)
    from_env = {key: environ[var] for key, var in (("llm.model", MODEL_ENV), ("llm.base_url", BASE_URL_ENV))
                if environ.get(var)}  # fmt: skip
    return {**_config_file(folder / CONFIG_FILE), **from_env, **pairs}


def _config_file(path: Path) -> dict[str, Any]:
    """The [llm] settings of ptxbench.toml as dotted settings; ConfigError naming the file for anything else."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not a TOML file we can read ({e})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a TOML file we can read (nested too deep)") from None
    unknown = sorted(set(data) - {"llm"})
    llm = data.get("llm", {})
    if unknown or not isinstance(llm, dict):
        raise ConfigError(f"{path}: only an [llm] table is read here (found {', '.join(unknown) or 'llm = …'})")
    secret = secret_key(llm, "llm")
    if secret:
        raise ConfigError(f"{path}: {secret} is refused: the API key is read only from the environment "
                          f"(${KEY_ENV}, or the variable llm.api_key_env names), never from a file")  # fmt: skip
    for key in llm:
        if key not in OpenAIConfig.model_fields or key == "name":
            known = ", ".join(k for k in OpenAIConfig.model_fields if k != "name")
            raise ConfigError(f"{path}: unknown setting llm.{key} (known: {known})")
    return {f"llm.{key}": value for key, value in llm.items()}  # TOML's values are typed already


def usage() -> str:
    lines = [
        f"usage: python -m agent.solve task=T arch=A [llm={'|'.join(POLICY_NAMES)}] [key=value ...]",
        "       python -m agent.solve resume=RUN_ID [runs_dir=DIR] [max_turns=N ...]",
        "",
        "settings (null unsets an optional one):",
        *cli.described(SolveConfig),
        "",
        f"llm=openai's model and base URL may also come from ${MODEL_ENV} and ${BASE_URL_ENV}, or from an [llm] table "
        f"in ./{CONFIG_FILE} (never the key: ${KEY_ENV} only).",
        "A resumed run (resume=RUN_ID) may change only: " + ", ".join(sorted(RESUMABLE)) + ".",
        "Exit status: 0 the run finished (whatever the model achieved); 1 it stopped early on an error",
        "(resume it); 2 usage or configuration error; 130 interrupted.",
    ]
    return "\n".join(lines)
