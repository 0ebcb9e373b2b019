"""Run configuration: YAML files validated by pydantic.

A run config names a model, sampling parameters, a prompt suite, the number of samples per
prompt, a seed and an output directory. ``include:`` pulls in another YAML file (a model
preset, for instance) relative to the including file; keys in the including file win.
``${VAR}`` in a string is replaced by the environment variable VAR.

Every problem is reported as one ``ConfigError`` line naming the file, the field and a fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import ConfigError
from harness.generation.base import GenParams

BACKEND_NAMES = ("openai", "transformers", "vllm")
#: The ``ModelConfig`` fields each backend does not read, with what decides in their place: set to anything but
#: their default, they would do nothing, so ``unread_field`` refuses them (a "device: cuda" that vLLM never sees).
UNREAD_FIELDS: dict[str, dict[str, str]] = {
    "openai": {"gguf_file": "the server loaded its model", "dtype": "the server chose it",
               "max_model_len": "the server's own limit holds", "device": "the server chose it",
               "engine_kwargs": "the server's engine was started with its own"},
    "vllm": {"device": "vLLM places the model itself", "base_url": "vLLM runs in this process",
             "api_key": "vLLM runs in this process", "concurrency": "vLLM batches by batch_size",
             "timeout_s": "vLLM runs in this process", "max_retries": "vLLM runs in this process"},
    "transformers": {"base_url": "transformers runs in this process", "api_key": "transformers runs in this process",
                     "concurrency": "transformers batches by batch_size",
                     "timeout_s": "transformers runs in this process",
                     "max_retries": "transformers runs in this process"},
}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """Which model to run, and how."""

    backend: str = Field("transformers", description="vllm, transformers or openai")
    path: str = Field(
        ...,
        description="an embedded model alias (e.g. smollm2-135m), a local model directory or GGUF "
        "file, or for the openai backend the model name the server serves",
    )
    gguf_file: str | None = Field(None, description="GGUF file inside `path` (transformers only)")
    base_url: str | None = Field(None, description="openai backend: e.g. http://127.0.0.1:8000/v1")
    api_key: str | None = Field(None, description="openai backend: bearer token, if the server needs one")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    chat_template: bool = Field(True, description="wrap the prompt in the model's chat template")
    system_message: Literal["turn", "in_user_turn", "drop"] = Field(
        "turn", description="where a prompt's system message goes (the homogeneity suite's 'You are a chatbot'): its "
                            "own turn, the start of the user turn (a template without a system role: Gemma 2), or "
                            "nowhere")
    max_model_len: int = Field(1024, ge=16)
    batch_size: int = Field(16, ge=1, description="sequences per batch (vLLM: max_num_seqs)")
    concurrency: int = Field(8, ge=1, description="openai backend: requests in flight")
    timeout_s: float = Field(120.0, gt=0, description="openai backend: seconds a request waits to connect, or "
                                                        "between two reads of the reply (not the reply's whole time)")
    max_retries: int = Field(5, ge=0, description="openai backend: retries on 429/5xx/timeouts")
    device: str = Field("auto", description="transformers backend: auto, cpu or cuda")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to the engine as is")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {v!r}; choose one of {', '.join(BACKEND_NAMES)}")
        return v

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        return _device_name(v)

    @field_validator("base_url")
    @classmethod
    def _a_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^/\s]+", v):  # else every request failed at generation
            raise ValueError("must be the server's http:// or https:// address, e.g. http://127.0.0.1:8000/v1")
        return v


def _device_name(v: str) -> str:
    from harness.models import DEVICE_NAME

    if not DEVICE_NAME.fullmatch(v):
        raise ValueError("must be auto, cpu, cuda or cuda:N (one GPU of several)")
    return v


def unread_field(model: ModelConfig, where: str) -> str | None:
    """A one-line error for the first field of ``model`` (at ``where``, e.g. "label.llm") that is set to other than
    its default and that its backend does not read, else None.

    >>> print(unread_field(ModelConfig(backend="vllm", path="m", device="cuda"), "model"))
    model.device: the vllm backend does not read it (vLLM places the model itself); remove it, or use backend transformers
    >>> unread_field(ModelConfig(backend="vllm", path="m", device="auto"), "model") is None
    True
    """
    unread = UNREAD_FIELDS.get(model.backend, {})
    for name in ModelConfig.model_fields:  # in the order the fields are declared
        if name in unread and name in model.model_fields_set \
                and getattr(model, name) != ModelConfig.model_fields[name].get_default(call_default_factory=True):
            readers = [b for b in BACKEND_NAMES if name not in UNREAD_FIELDS.get(b, {})]
            return (f"{where}.{name}: the {model.backend} backend does not read it ({unread[name]}); remove it, "
                    f"or use backend {' or '.join(readers)}")
    return None


class SamplingConfig(_Strict):
    """Sampling parameters (vLLM semantics: top_k -1 or 0 disables it, temperature 0 is greedy)."""

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    max_new_tokens: int = Field(200, ge=1)
    stop: list[str] = Field(default_factory=list)

    def to_params(self) -> GenParams:
        return GenParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_new_tokens,
            stop=tuple(self.stop),
        )


class LabelConfig(_Strict):
    """The label stage."""

    labeller: str = Field("encoder", description="encoder (default), llm or rules")
    batch_size: int | None = Field(None, ge=1, description="stories per batch; default: the labeller's own "
                                   "(encoder: 32 on CPU, 256 beside a GPU; rules 64; llm: label.llm.batch_size)")
    model_dir: str | None = Field(None, description="encoder weights; default: the user cache, trained on first use")
    train_if_missing: bool | None = Field(
        None, description="train the encoder when its directory holds none; default: only for the user cache, so "
                          "a mistyped model_dir stops the run instead of training a new model there")
    llm: ModelConfig | None = Field(None, description="labeller llm: the model that extracts characters")
    llm_sampling: SamplingConfig | None = Field(
        None, description="labeller llm: sampling of a story's first attempt (its retries are sampled at a temperature "
                          "of at least 0.7); the fields given here replace the labeller's own, greedy with 256 new "
                          "tokens. The authors' code used the API's defaults: temperature 1, top_p 1")
    llm_attempts: int = Field(3, ge=1, description="labeller llm: attempts per story, the first and its retries "
                                                   "(the authors' code: 3)")
    shard_rows: int = Field(2000, ge=1)
    train_extra: list[str] = Field(
        default_factory=list,
        description="more labelled JSONL for the encoder's training on first use (e.g. laissez_faire_train150.jsonl)")
    train_epochs: int = Field(8, ge=1, description="epochs of the encoder's training on first use")
    train_seeds: list[Annotated[int, Field(ge=0, le=2**32 - 1)]] = Field(
        default_factory=lambda: [0], min_length=1,
        description="seeds of the encoder's training on first use; more than one trains a model per seed and saves "
                    "the mean of their weights (harness.labelling.training.train_soup): one model's cost to label, "
                    "each seed's to train")
    train_jobs: int = Field(1, ge=1, description="with several train_seeds: members trained at once on the CPU, a "
                                                 "process each (2 on 2 cores: faster than one after the other)")
    train_precision: Literal["float32", "bfloat16"] | None = Field(
        None, description="the arithmetic of the encoder's training on first use: float32 (default) or bfloat16, "
                          "faster on a CPU with AVX512-BF16 or AMX (harness.labelling.training.train_precision)")
    name_check: bool = Field(True, description="encoder: swap two named characters' pronouns when both first names "
                                               "contradict them (harness.labelling.name_gender)")
    action_check: bool = Field(True, description="encoder: exchange the two characters of a power-laden Love story "
                                                 "when the grammar says the labelled object does the subject's action "
                                                 "(harness.labelling.role_agent)")
    pronoun_binding: bool = Field(True, description="encoder: give a named character left without pronouns the "
                                                    "he/his or she/her its own sentences bind to it, or (with the "
                                                    "name check) those of the gender nobody holds when its first "
                                                    "name fits them (harness.labelling.pronoun_binding)")
    precision: Literal["bfloat16", "int8", "float32", "float16"] | None = Field(
        None, description="encoder: the model's arithmetic (CPU: bfloat16, int8 or float32; GPU: float16, bfloat16 or "
                          "float32); default: float16 on a GPU, bfloat16 on a CPU with AMX, else int8 "
                          "(harness.labelling.encoder.default_precision)")
    apposition_check: bool = Field(True, description="encoder: exchange the two characters when the story ties them "
                                                     "to each other's role nouns ('an actor, Ethan Michaels') "
                                                     "(harness.labelling.role_apposition)")

    @field_validator("labeller")
    @classmethod
    def _known_labeller(cls, v: str) -> str:
        from harness.labelling import LABELLERS

        if v not in LABELLERS.names():  # else a typo stopped the run only when its label stage began
            raise ValueError(f"unknown labeller {v!r}; choose one of {', '.join(LABELLERS.names())}")
        return v


class IdentityConfig(_Strict):
    """The identities stage: gender lexicon and name table."""

    name_mode: Literal["paper", "renormalised"] = "paper"
    lexicon: str | None = Field(None, description="gender lexicon id or YAML path; default Table S6a")
    min_population: int = Field(100, ge=0, description="reports withhold likelihoods of rarer names")


class StatsConfig(_Strict):
    """The statistics stage."""

    mode: Literal["paper", "principled"] = Field("paper", description="principled adds bootstrap CIs, exact p and FDR")
    threshold_min: int = Field(1, ge=0, le=100)
    threshold_max: int = Field(99, ge=0, le=100, description="99 as the authors' code, 100 as the paper")
    n_boot: int = Field(1000, ge=0)
    seed: int = Field(0, ge=0)
    backend: Literal["auto", "numpy", "triton", "cupy"] = "auto"

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> "StatsConfig":
        if self.threshold_min > self.threshold_max:  # an empty sweep: every ratio NaN, found after generating
            raise ValueError(f"threshold_min {self.threshold_min} is above threshold_max {self.threshold_max}; "
                             f"give threshold_min <= threshold_max")
        return self


class EmbeddingConfig(_Strict):
    """The embed stage of a homogeneity run: which embedder turns each text into one vector."""

    embedder: str = Field("minilm-l6", description="a preset of harness.homogeneity.embed.EMBEDDERS "
                          "(minilm-l6, sbert, bert-2, bert-3, roberta-2, roberta-3, bert-2-extra)")
    path: str | None = Field(None, description="local model directory (presets other than minilm-l6 need one)")
    preprocess: str | None = Field(None, description="override the preset's preprocessing: none, simple_prep, "
                                   "simple_prep_cased, extra_prep or extra_prep_words")
    batch_size: int = Field(64, ge=1, description="texts per forward pass")
    device: str = Field("auto", description="auto, cpu or cuda")
    max_length: int | None = Field(None, ge=8, description="tokens per text (default: the preset's, 512)")
    cache_dtype: Literal["float16", "float32"] = Field("float16", description="dtype of the cached vectors")

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        return _device_name(v)


class HomogeneityConfig(_Strict):
    """Generation top-up and statistics options of a homogeneity run (bootstrap replicates, seed
    and kernel backend come from ``statistics:``)."""

    refusal: Literal["authors", "open-models"] = Field("authors", description="refusal filter: the authors' six "
                                                       "case-sensitive substrings, or a broader open-model lexicon")
    target: int | None = Field(None, ge=2, description="usable texts per prompt (default: samples_per_prompt)")
    max_topup_rounds: int = Field(5, ge=0, description="top-up rounds for refused or empty samples")
    n_perm: int = Field(0, ge=0, description="text-level permutation replicates (0 = skip)")
    top_k: int = Field(3, ge=1, description="most and least similar pairs kept per prompt")
    alpha: float = Field(0.05, gt=0, lt=1)


STAGES = ("generate", "label", "identities", "statistics", "report")
#: The stages of a homogeneity run (suite: homogeneity), in order.
HOMOGENEITY_STAGES = ("generate", "embed", "statistics", "report")


class RunConfig(_Strict):
    """A whole run: model, sampling, suite, sample count, seed and where results go."""

    name: str = "run"
    model: ModelConfig
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    suite: str = "laissez-faire"
    wording: str | None = Field(None, description="suite wording; None takes the suite's default")
    prompts: list[str] | None = Field(None, description="restrict to these prompt ids")
    samples_per_prompt: int = Field(1000, ge=1)
    seed: int = Field(0, ge=0)
    output_dir: str = "runs/run"
    shard_rows: int = Field(256, ge=1, description="rows per Parquet shard")
    stages: list[Literal["generate", "label", "identities", "statistics", "report", "embed"]] = Field(
        default_factory=lambda: list(STAGES),
        description="homogeneity runs take generate, embed, statistics, report",
    )
    label: LabelConfig = Field(default_factory=LabelConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    statistics: StatsConfig = Field(default_factory=StatsConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    homogeneity: HomogeneityConfig = Field(default_factory=HomogeneityConfig)

    @field_validator("prompts")
    @classmethod
    def _some_prompts(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:  # a run of no prompts did nothing and exited 0
            raise ValueError("an empty list runs no prompt; list prompt ids or drop the key for all of them")
        return v

    @field_validator("stages")
    @classmethod
    def _some_stages(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("an empty list runs no stage; list the stages or drop the key for all of them")
        return v

    @field_validator("output_dir")
    @classmethod
    def _a_folder(cls, v: str) -> str:
        if not v.strip():  # "" wrote the run's folders into the working directory
            raise ValueError("an empty path; give the run's folder, e.g. runs/run")
        return v


def _expand_env(value: Any, where: str, path: Path) -> Any:
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            var = m.group(1)
            if var not in os.environ:
                raise ConfigError(f"{path}: {where} uses ${{{var}}} but {var} is not set; export it or write the value")
            return os.environ[var]
        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k), path) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]", path) for i, v in enumerate(value)]
    return value


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key written twice in one mapping (which it would read as the last one)."""

    def construct_mapping(self, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *defaults" keeps its meaning
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise _DuplicateKey(f"key '{key}' is written twice in one mapping (line "
                                    f"{key_node.start_mark.line + 1}); keep one of them")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a YAML mapping, resolving ``include:`` (a path or a list of paths)."""
    path = Path(path)
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: include cycle ({' -> '.join(str(p) for p in _seen)})")
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a config file; give the path of a YAML file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (at byte offset {e.start}); save the config as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror}); check the path and its permissions") from None
    except _DuplicateKey as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{at}; fix the syntax") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    includes = doc.pop("include", None)
    if includes:
        merged: dict[str, Any] = {}
        for inc in [includes] if isinstance(includes, str) else includes:
            merged = _deep_merge(merged, read_yaml(path.parent / inc, _seen + (path.resolve(),)))
        doc = _deep_merge(merged, doc)
    return doc


def _describe(err: ValidationError, path: Path, overridden: tuple[str, ...] = ()) -> str:
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or "(top level)"
    by_set = next((k for k in overridden if field == k or field.startswith(k + ".")), None)
    if by_set is not None:  # the value came from the command line, not from the file
        path = Path(f"--set {by_set} (over {path})")
    kind = e["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key '{field}'; remove it or check its spelling"
    if kind == "missing":
        return f"{path}: missing required field '{field}'; add it"
    msg = e["msg"].removeprefix("Value error, ")
    return f"{path}: field '{field}': {msg} (got {e.get('input')!r})"


def parse_config(doc: dict[str, Any], path: Path | str = "<config>", overridden: tuple[str, ...] = ()) -> RunConfig:
    """Validate a config's mapping; an error names ``path``, or the ``--set`` key (of ``overridden``) it came by."""
    path = Path(path)
    doc = _expand_env(doc, "", path)
    try:
        return RunConfig.model_validate(doc)
    except ValidationError as err:
        raise ConfigError(_describe(err, path, overridden)) from None


def apply_override(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` (``model.backend``) of a config's mapping to ``value``, making the sections it names;
    a ConfigError where a part of it names a value that is no section (``model.path.x`` with a path set)."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"--set {key}: an empty part in the key; give a dotted key such as model.backend")
    node = doc
    for i, p in enumerate(parts[:-1]):
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:i + 1])} is a value ({node!r}), not a section with "
                              f"keys; set {'.'.join(parts[:i + 1])} itself")
    node[parts[-1]] = value


def load_config(path: Path | str, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Load, merge ``overrides`` (dotted keys, e.g. {"model.backend": "vllm"}) and validate."""
    path = Path(path)
    doc = read_yaml(path)
    for key, value in (overrides or {}).items():
        apply_override(doc, key, value)
    cfg = parse_config(doc, path, tuple(overrides or ()))
    check_suite(cfg, path)
    check_model(cfg.model, path)
    check_output_dir(cfg, path)
    check_unread_fields(cfg, path)
    if cfg.suite == "homogeneity":
        from harness.homogeneity.stages import check_homogeneity

        check_homogeneity(cfg, path)
    return cfg


def check_output_dir(cfg: RunConfig, path: Path | str) -> None:
    """Stop early, naming the config file, when ``output_dir`` or a folder above it is a file (a run's folders
    could not be made there)."""
    from harness.store import file_in_the_way

    out = Path(cfg.output_dir)
    if (at := file_in_the_way(out)) is not None:
        reason = "a file is there" if at == out else f"{at} above it is a file"
        raise ConfigError(f"{path}: field 'output_dir': {out} cannot be a run's folder ({reason}); give a folder path "
                          f"(-o DIR)")


#: The label: fields one labeller reads (the rest, labeller, batch_size and shard_rows, every labeller reads).
LABELLER_FIELDS = {
    "encoder": ("model_dir", "train_if_missing", "train_extra", "train_epochs", "train_seeds", "train_jobs",
                "train_precision",
                "name_check", "action_check", "pronoun_binding", "precision", "apposition_check"),
    "llm": ("llm", "llm_sampling", "llm_attempts"),
}


def check_unread_fields(cfg: RunConfig, path: Path | str) -> None:
    """Stop early, naming the config file, on a stage or a section the run's kind never reads, set to other than its
    default: a laissez-faire run's embed stage, embedding: or homogeneity: block; a homogeneity run's label and
    identities stages, label: or identity: block, or statistics.mode and thresholds; a label: field of another
    labeller than label.labeller (``LABELLER_FIELDS``); a bootstrap (statistics.n_boot, statistics.seed) in the
    paper mode, which draws none. Each did nothing, or failed once its stage began."""
    homogeneity = cfg.suite == "homogeneity"
    kind, other = ("homogeneity", "laissez-faire") if homogeneity else ("laissez-faire", "homogeneity")
    stages = HOMOGENEITY_STAGES if homogeneity else STAGES
    if not (homogeneity and list(cfg.stages) == list(STAGES)):  # the default list means all four homogeneity stages
        if wrong := [s for s in cfg.stages if s not in stages]:
            raise ConfigError(f"{path}: field 'stages': {', '.join(wrong)} is no stage of a {kind} run (suite "
                              f"{cfg.suite}); choose from {', '.join(stages)}")
    unread = ["label", "identity"] if homogeneity else ["embedding", "homogeneity"]
    for section in unread:
        if getattr(cfg, section) != type(getattr(cfg, section))():
            raise ConfigError(f"{path}: field '{section}': read by {other} runs only, and this is a {kind} run (suite "
                              f"{cfg.suite}); remove it")
    if not homogeneity:
        for reader, names in LABELLER_FIELDS.items():
            if cfg.label.labeller == reader:
                continue
            for name in names:
                if getattr(cfg.label, name) != LabelConfig.model_fields[name].get_default(call_default_factory=True):
                    raise ConfigError(f"{path}: field 'label.{name}': read by the {reader} labeller only, and this run "
                                      f"labels with {cfg.label.labeller}; remove it, or set label.labeller: {reader}")
    if not homogeneity and cfg.label.train_jobs > 1 and len(cfg.label.train_seeds) == 1:
        raise ConfigError(f"{path}: field 'label.train_jobs': trains a soup's members at once, and one seed in "
                          f"label.train_seeds trains one model; give more seeds, or drop it")
    stats = ("mode", "threshold_min", "threshold_max") if homogeneity else \
        (("n_boot", "seed") if cfg.statistics.mode == "paper" else ())
    for name in stats:
        if getattr(cfg.statistics, name) != StatsConfig.model_fields[name].default:
            why = (f"a {kind} run does not read it" if homogeneity else
                   "the paper mode draws no bootstrap; set statistics.mode: principled for one")
            raise ConfigError(f"{path}: field 'statistics.{name}': {why}; remove it")


def check_kernel_backend(backend: str, where: str = "statistics.backend") -> None:
    """Stop a kernel ``backend`` this machine cannot run (cupy or triton without a GPU), named as ``where`` gives
    it (``statistics.backend``, ``--backend``), before the run's first stage or the analysis's embedding, not when
    the statistics begin after hours of generating."""
    if backend in ("auto", "numpy"):
        return
    try:
        from harness.kernels import _common
    except ImportError as e:
        raise ConfigError(f"{where} {backend}: needs harness.kernels ({e}); install the kernels extra, or use numpy "
                          f"or auto") from None
    if backend == "triton" and not _common.triton_runnable():
        raise ConfigError(f"{where} triton: needs triton and a CUDA device (or TRITON_INTERPRET=1 for the CPU "
                          f"interpreter) and this machine has none; use numpy or auto")
    if backend == "cupy" and not _common.cupy_runnable():
        raise ConfigError(f"{where} cupy: needs cupy and a CUDA device and this machine has none; use numpy or auto")


def check_suite(cfg: RunConfig, path: Path | str) -> None:
    """Stop early, naming the config file, on an unknown suite, wording or prompt id."""
    from harness.suites import SUITES, get_suite

    if cfg.suite not in SUITES:
        known = ", ".join(sorted(SUITES.names()))
        raise ConfigError(f"{path}: field 'suite': unknown suite {cfg.suite!r}; choose one of {known}")
    try:
        suite = get_suite(cfg.suite, cfg.wording)
    except ConfigError as e:
        raise ConfigError(f"{path}: field 'wording': {e}; use one of those or drop the key for the suite's default") from None
    if cfg.prompts is not None:
        by_id = suite.by_id()
        unknown = [p for p in cfg.prompts if p not in by_id]
        if unknown:
            raise ConfigError(
                f"{path}: field 'prompts': unknown prompt id(s) {', '.join(map(repr, unknown))} in suite {suite.name}; "
                f"list the ids with `harness prompts list --suite {suite.name}`"
            )


def check_model(model: ModelConfig, path: Path | str) -> None:
    """Stop early, naming the config file, when the model's weights cannot be found or a field is set that its
    backend does not read."""
    if (unread := unread_field(model, "model")) is not None:
        raise ConfigError(f"{path}: {unread}")
    if model.backend == "openai":
        if not model.base_url:
            raise ConfigError(f"{path}: field 'model.base_url' is required by the openai backend, e.g. http://127.0.0.1:8000/v1")
        return
    from harness import models

    try:
        models.resolve(model.backend, model.path, model.gguf_file, prepare_missing=False)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
