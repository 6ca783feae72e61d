"""What the service accepts and answers, one pydantic model each; a request that does not validate gets the
same `field: message` lines the command-line tools print (tools/answer.py's formatter)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.evaluation import Evaluation
from tools.options import EvalOptions, Profile
from tools.reward import Reward, RewardConfig
from tools.solution import Solution

MAX_JOB_ITEMS = 4096  # a job is held in memory with its results until it is read
NAME_CHARS = 64  # task and arch names are short words; anything longer is not one


class EvaluateRequest(BaseModel):
    """One attempt: the model's Markdown answer as it wrote it, or an already parsed Solution."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(max_length=NAME_CHARS, description="A task name or alias (GET /v1/tasks).")
    arch: str = Field(max_length=NAME_CHARS, description="sm_90a or sm_100a (aliases: sm_90, h100, h200, b200…).")
    answer: str | None = Field(None, description="The Markdown answer: one ```ptx or ```cuda block and a ```json spec.")
    solution: Solution | None = None
    options: EvalOptions = Field(default_factory=EvalOptions, description="How hard to evaluate (tools/options.py).")

    @model_validator(mode="after")
    def _one_source(self) -> EvaluateRequest:
        if (self.answer is None) == (self.solution is None):
            raise ValueError("give exactly one of answer (Markdown text) and solution (a Solution object)")
        return self

    def eval_options(self, default_profile: Profile) -> EvalOptions:
        """The options, with `default_profile` unless the request asks for one."""
        if "profile" in self.options.model_fields_set:
            return self.options
        return self.options.model_copy(update={"profile": default_profile})


class RewardRequest(EvaluateRequest):
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The mapping's weights.")


class RewardReply(BaseModel):
    """POST /v1/reward's reply: an Evaluation and its reward."""

    score: float
    reward: Reward
    evaluation: Evaluation


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[EvaluateRequest] = Field(min_length=1, max_length=MAX_JOB_ITEMS)
    reward: RewardConfig | None = Field(None, description="Score each item too, with these weights.")


class JobItem(BaseModel):
    """One item's result: its Evaluation (and reward, when asked), or why it could not be evaluated."""

    evaluation: Evaluation | None = None
    reward: Reward | None = None
    error: str | None = None


class JobState(BaseModel):
    id: str
    state: Literal["running", "done"]
    count: int
    done: int
    results: list[JobItem] | None = Field(None, description="In the items' order, once every item is done.")


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request (`--remote_rm_url http://…/v1/openrlhf`): each query is its prompt
    followed by the response, as the trainer's template joined them; each label names the problem (our
    dataset builder writes them as JSON: {"task": …, "arch": …})."""

    query: list[str] = Field(min_length=1, max_length=MAX_JOB_ITEMS)
    prompts: list[str] = Field(min_length=1, max_length=MAX_JOB_ITEMS)
    labels: list[str] = Field(min_length=1, max_length=MAX_JOB_ITEMS)

    @model_validator(mode="after")
    def _same_lengths(self) -> OpenRLHFRequest:
        if not len(self.query) == len(self.prompts) == len(self.labels):
            raise ValueError("query, prompts and labels must be lists of the same length")
        return self
