import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import load_config
from harness.errors import ConfigError
from harness.generation.base import GenParams

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_configs_validate(monkeypatch, tmp_path):
    cfg = load_config(ROOT / "configs" / "smoke.yaml")
    assert cfg.model.backend == "vllm" and cfg.model.path == "smollm2-135m"
    assert cfg.sampling.to_params() == GenParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=160)
    # The replication config resolves its preset through include: and ${HARNESS_MODEL_DIR}.
    (tmp_path / "Meta-Llama-3.1-8B-Instruct").mkdir()
    (tmp_path / "Meta-Llama-3.1-8B-Instruct" / "config.json").write_text("{}")
    monkeypatch.setenv("HARNESS_MODEL_DIR", str(tmp_path))
    rep = load_config(ROOT / "configs" / "laissez_faire_replication.yaml")
    assert rep.samples_per_prompt == 1000
    assert rep.model.path == f"{tmp_path}/Meta-Llama-3.1-8B-Instruct"
    assert rep.model.dtype == "bfloat16"


@pytest.mark.parametrize(
    "body, pattern",
    [
        ("model: {backend: vllm, path: smollm2-135m}\nsampels_per_prompt: 3\n", r"unknown key 'sampels_per_prompt'"),
        ("model: {backend: vllm, path: smollm2-135m}\nsampling: {top_p: 1.5}\n", r"field 'sampling.top_p'"),
        ("model: {backend: vllm, path: smollm2-135m}\nsamples_per_prompt: lots\n", r"field 'samples_per_prompt'.*valid integer"),
        ("model: {backend: llamafile, path: smollm2-135m}\n", r"field 'model.backend': unknown backend 'llamafile'; choose one of openai, transformers, vllm"),
        ("model: {backend: vllm, path: /no/such/model}\n", r"model.path: '/no/such/model' does not exist"),
        ("model: {backend: openai, path: m}\n", r"'model.base_url' is required"),
        # every request failed at generation with 'UnsupportedProtocol'
        ("model: {backend: openai, path: m, base_url: notaurl}\n",
         r"field 'model.base_url': must be the server's http:// or https:// address, e.g. http://127.0.0.1:8000/v1 "
         r"\(got 'notaurl'\)$"),
        ("model: {backend: openai, path: m, base_url: 'http://'}\n",  # a scheme without a server
         r"field 'model.base_url': must be the server's http:// or https:// address.*\(got 'http://'\)$"),
        # a field its backend does not read would do nothing: refused, naming the backends that read it
        ("model: {backend: vllm, path: smollm2-135m, device: cuda}\n",
         r"model\.device: the vllm backend does not read it \(vLLM places the model itself\); remove it, or use "
         r"backend transformers$"),
        ("model: {backend: vllm, path: smollm2-135m, base_url: 'http://127.0.0.1:8000/v1'}\n",
         r"model\.base_url: the vllm backend does not read it .*; remove it, or use backend openai$"),
        ("model: {backend: openai, path: m, base_url: 'http://127.0.0.1:8000/v1', dtype: bfloat16}\n",
         r"model\.dtype: the openai backend does not read it \(the server chose it\); remove it, or use backend "
         r"transformers or vllm$"),
        ("model: {backend: transformers, path: smollm2-135m, concurrency: 4}\n",
         r"model\.concurrency: the transformers backend does not read it .*or use backend openai$"),
        ("sampling: {temperature: 1}\n", r"missing required field 'model'"),
        ("model: [1, 2\n", r"invalid YAML at line"),
        ("- model\n- seed\n", r"the top level must be a mapping of keys to values$"),  # was an AttributeError
        ("model: {backend: vllm, path: smollm2-135m}\nsuite: nope\n",
         r"field 'suite': unknown suite 'nope'; choose one of .*laissez-faire"),
        ("model: {backend: vllm, path: smollm2-135m}\nwording: tabloid\n",
         r"field 'wording': .*one of released, paper, got 'tabloid'; use one of those"),
        # an empty list ran nothing and exited 0; an empty output_dir wrote the run into the working directory
        ("model: {backend: vllm, path: smollm2-135m}\nprompts: []\n",
         r"field 'prompts': an empty list runs no prompt; list prompt ids or drop the key"),
        ("model: {backend: vllm, path: smollm2-135m}\nstages: []\n",
         r"field 'stages': an empty list runs no stage; list the stages or drop the key"),
        ("model: {backend: vllm, path: smollm2-135m}\noutput_dir: ' '\n",
         r"field 'output_dir': an empty path; give the run's folder"),
        # these stopped the run only at the stage that reads them, after generating
        ("model: {backend: vllm, path: smollm2-135m}\nstatistics: {threshold_min: 60, threshold_max: 40}\n",
         r"field 'statistics': threshold_min 60 is above threshold_max 40; give threshold_min <= threshold_max"),
        ("model: {backend: vllm, path: smollm2-135m}\nlabel: {precision: fp7}\n",
         r"field 'label.precision': Input should be 'bfloat16', 'int8', 'float32' or 'float16'"),
        ("model: {backend: vllm, path: smollm2-135m}\nprompts: [learning-neutral-01, nope-99]\n",
         r"field 'prompts': unknown prompt id\(s\) 'nope-99' in suite laissez-faire; list the ids with `harness prompts list"),
    ],
)
def test_bad_configs_name_file_field_and_fix(tmp_path, body, pattern):
    p = write(tmp_path, body)
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(p)
    assert str(p) in str(e.value)
    assert "\n" not in str(e.value)


def test_a_config_that_cannot_be_read_as_text_or_repeats_a_key_is_named_in_one_line(tmp_path):
    """A directory, a file that is not UTF-8 or a key written twice (which YAML would read as its last value,
    silently) stop in one line naming the file; a merge key ("<<: *defaults") still works."""
    folder = tmp_path / "folder"
    folder.mkdir()
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("model: {backend: vllm, path: smollm2-135m}\nname: caf\xe9\n".encode("latin-1"))
    twice = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\nseed: 0\nseed: 1\n", "twice.yaml")
    nested = write(tmp_path, "model: {backend: vllm, path: smollm2-135m, path: other}\n", "nested.yaml")
    for path, pattern in ((folder, "a directory, not a config file; give the path of a YAML file"),
                          (latin, r"not UTF-8 text \(at byte offset 52\); save the config as UTF-8"),
                          (twice, r"key 'seed' is written twice in one mapping \(line 3\); keep one of them"),
                          (nested, r"key 'path' is written twice in one mapping \(line 1\)")):
        with pytest.raises(ConfigError, match=pattern) as e:
            load_config(path)
        assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    cfg = load_config(write(tmp_path, "model: &m {backend: vllm, path: smollm2-135m}\nlabel:\n  labeller: llm\n  llm:\n    <<: *m\n"
                                      "    max_model_len: 512\n", "merge.yaml"))
    assert (cfg.label.llm.backend, cfg.label.llm.max_model_len, cfg.model.max_model_len) == ("vllm", 512, 1024)


def test_an_output_dir_where_a_file_stands_is_refused_before_any_work(tmp_path):
    """`harness generate|run -o FILE` (or a folder under a file) stops at the config, in one line, instead of a
    NotADirectoryError when the first shard is written."""
    a_file = tmp_path / "stories.jsonl"
    a_file.write_text("{}\n")
    config = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\n")
    for out, pattern in ((a_file, rf"field 'output_dir': {a_file} cannot be a run's folder \(a file is there\); "
                                  r"give a folder path \(-o DIR\)$"),
                         (a_file / "run", rf"{a_file / 'run'} cannot be a run's folder \({a_file} above it is a "
                                          r"file\); give a folder path")):
        with pytest.raises(ConfigError, match=pattern) as e:
            load_config(config, {"output_dir": str(out)})
        assert str(e.value).startswith(f"{config}: ")
    assert load_config(config, {"output_dir": str(tmp_path / "new" / "run")}).output_dir.endswith("new/run")


def test_a_field_its_backend_does_not_read_passes_at_its_default(tmp_path):
    """Only a value that would change something is refused: a preset written out in full ("device: auto") loads
    with any backend, and every field set is read by the backend that reads it."""
    cfg = load_config(write(tmp_path, "model: {backend: vllm, path: smollm2-135m, device: auto, concurrency: 8, "
                                      "engine_kwargs: {}}\n"))
    assert cfg.model.device == "auto"
    cfg = load_config(write(tmp_path, "model: {backend: transformers, path: smollm2-135m, device: cpu, "
                                      "dtype: float32, max_model_len: 512}\n"))
    assert cfg.model.device == "cpu"
    cfg = load_config(write(tmp_path, "model: {backend: openai, path: m, base_url: 'http://127.0.0.1:8000/v1', "
                                      "concurrency: 4, timeout_s: 5, max_retries: 0}\n"))
    assert cfg.model.concurrency == 4


def test_a_server_address_is_taken_with_http_or_https():
    """base_url takes an https:// address as well as an http:// one, as its error says; a scheme without a server
    ("https:///v1") is refused."""
    from harness.config import ModelConfig

    for url in ("http://127.0.0.1:8000/v1", "https://api.example.org/v1"):
        assert ModelConfig(backend="openai", path="m", base_url=url).base_url == url
    with pytest.raises(ValueError, match="must be the server's http:// or https:// address"):
        ModelConfig(backend="openai", path="m", base_url="https:///v1")


def test_gguf_refused_for_vllm(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="vLLM cannot read the GGUF"):
        load_config(write(tmp_path, f"model: {{backend: vllm, path: {gguf}}}\n"))


def test_unset_environment_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"\$\{NOT_SET_ANYWHERE\} but NOT_SET_ANYWHERE is not set"):
        load_config(write(tmp_path, "model: {backend: vllm, path: '${NOT_SET_ANYWHERE}/x'}\n"))
    # a string inside a list is expanded too, and an unset variable there is named by its position
    with pytest.raises(ConfigError, match=r"sampling\.stop\[1\] uses \$\{NOT_SET_ANYWHERE\} but NOT_SET_ANYWHERE"):
        load_config(write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\n"
                                    "sampling: {stop: [END, '${NOT_SET_ANYWHERE}']}\n"))
    monkeypatch.setenv("HARNESS_STOP", "THE END")
    cfg = load_config(write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\n"
                                      "sampling: {stop: ['${HARNESS_STOP}']}\n"))
    assert cfg.sampling.stop == ["THE END"]


def test_include_and_overrides(tmp_path):
    write(tmp_path, "model: {backend: transformers, path: smollm2-135m, batch_size: 4}\n", "preset.yaml")
    p = write(tmp_path, "include: preset.yaml\nmodel: {batch_size: 8}\nsamples_per_prompt: 3\n")
    cfg = load_config(p, {"seed": 7, "model.chat_template": False})
    assert (cfg.model.backend, cfg.model.batch_size, cfg.samples_per_prompt, cfg.seed, cfg.model.chat_template) == (
        "transformers", 8, 3, 7, False)
    # two files that include each other: one line naming the cycle, not a RecursionError
    write(tmp_path, "include: b.yaml\nmodel: {backend: vllm, path: smollm2-135m}\n", "a.yaml")
    write(tmp_path, "include: a.yaml\nseed: 1\n", "b.yaml")
    with pytest.raises(ConfigError, match=r"a\.yaml: include cycle \(.*a\.yaml -> .*b\.yaml\)$"):
        load_config(tmp_path / "a.yaml")


@pytest.mark.parametrize("kw, msg", [({"top_p": 0.0}, "top_p must be in"), ({"temperature": -1}, "temperature"), ({"max_tokens": 0}, "max_new_tokens")])
def test_gen_params_validate(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        GenParams(**kw)
    assert GenParams(top_k=0).top_k == -1 and GenParams(stop="END").stop == ("END",)


def test_cli_exits_nonzero_with_one_line(tmp_path):
    p = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\nbogus: 1\n")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "generate", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {p}: unknown key 'bogus'; remove it or check its spelling"]


def test_usage_errors_are_one_line_and_exit_codes_pass_through_the_command():
    """A missing argument or an unknown option was a box of five lines; the harness command now prints one, as for
    its own errors. A subcommand's exit code (label eval: 3 for a missing gold file) reaches the shell."""
    def harness(*args):
        r = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT)
        return r.returncode, r.stdout, r.stderr.strip().splitlines()

    assert harness("run") == (2, "", ["error: Missing argument 'config'; see `harness run --help`"])
    assert harness("run", "configs/smoke.yaml", "--bogus") == (2, "", ["error: No such option: --bogus; see "
                                                                       "`harness run --help`"])
    code, out, err = harness("label", "eval", "--gold", "no/such.jsonl", "--labeller", "rules")
    assert (code, out) == (3, "") and err == ["error: no/such.jsonl: file not found; pass a JSONL file of labelled "
                                              "stories"]
    code, out, err = harness("prompts", "list", "--json")
    assert code == 0 and out.startswith("[") and not err


def test_a_full_disk_or_a_folder_that_refuses_writes_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """A full disk under a running command (`harness label label`, a shard, a checkpoint) ended in a traceback of
    some 50 lines; main now says what and where in one line, exit 1, and that a rerun goes on. An OSError of
    another kind (a bug's) is not hidden. A folder that will not take a file is found before any work."""
    import errno

    import harness.cli as cli
    import harness.labelling.cli as label_cli
    from harness.store import check_output_file

    stories = ROOT / "tests" / "labelling" / "data" / "gold.jsonl"
    args = ["harness", "label", "label", str(stories), "--out", str(tmp_path / "o.jsonl"), "--labeller", "rules"]
    for err, code in ((OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "o.jsonl.tmp")), 1),
                      (OSError(errno.EBADF, "Bad file descriptor"), None)):
        def full(*a, err=err, **kw):
            raise err
        monkeypatch.setattr(label_cli, "_run_fingerprint", full)
        monkeypatch.setattr(sys, "argv", args)
        if code is None:
            with pytest.raises(OSError, match="Bad file descriptor"):
                cli.main()
            continue
        with pytest.raises(SystemExit) as e:
            cli.main()
        assert e.value.code == 1
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: No space left on device: {tmp_path / 'o.jsonl.tmp'}; free space or fix the permissions there, "
            f"then rerun the same command"]
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    monkeypatch.setattr("tempfile.NamedTemporaryFile", lambda *a, **kw: (_ for _ in ()).throw(
        PermissionError(errno.EACCES, "Permission denied")))
    with pytest.raises(ConfigError, match=r"^--out .*blocked/o\.jsonl: cannot write in its folder \(Permission denied\); "
                                          r"give a path you can write to$"):
        check_output_file(blocked / "o.jsonl", "--out")


def test_a_file_name_too_long_for_the_file_system_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """ENAMETOOLONG (a file written beside an output, its name longer than the output's) was a traceback; main says
    it in one line, exit 2."""
    import errno

    import harness.cli as cli
    import harness.labelling.cli as label_cli

    stories = ROOT / "tests" / "labelling" / "data" / "gold.jsonl"
    long = str(tmp_path / ("o" * 300))

    def too_long(*a, **kw):
        raise OSError(errno.ENAMETOOLONG, "File name too long", long)

    monkeypatch.setattr(label_cli, "_run_fingerprint", too_long)
    monkeypatch.setattr(sys, "argv", ["harness", "label", "label", str(stories), "--out", str(tmp_path / "o.jsonl"),
                                      "--labeller", "rules"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: File name too long: {long}; give the output a shorter file name, then rerun the same command"]


def test_set_options_are_refused_in_one_line_naming_the_option(tmp_path):
    """`--set` values that are not YAML, keys through a value (`model.path.x`, `stages.0`), a key given twice,
    `--set output_dir` beside -o, and an empty -o: one line, exit 2, nothing made (a yaml traceback, a TypeError,
    last-wins and the working directory before). A value --set gives that fails validation names --set."""
    from typer.testing import CliRunner

    from harness.cli import app

    config = write(tmp_path, f"model: {{backend: transformers, path: smollm2-135m}}\nstages: [generate]\n"
                             f"output_dir: {tmp_path / 'run'}\n")
    for args, says in (
        (["--set", "prompts=[a"], "--set 'prompts=[a': the value is not valid YAML"),
        (["--set", "model.path.x=1"], "--set model.path.x: model.path is a value ('smollm2-135m'), not a section"),
        (["--set", "stages.0=label"], "--set stages.0: stages is a value (['generate']), not a section"),
        (["--set", "model..path=x"], "--set model..path: an empty part in the key"),
        (["--set", "=3"], "--set '=3': no key before '='"),
        (["--set", "seed=1", "--set", "seed=2"], "--set seed: given twice"),
        (["--set", f"output_dir={tmp_path / 'b'}", "-o", str(tmp_path / "c")], "--set output_dir and -o both give"),
        (["-o", ""], "-o '': an empty path"),
        (["--set", "samples_per_prompt=lots"], f"--set samples_per_prompt (over {config}): field 'samples_per_prompt'"),
        (["--shard", ""], "--shard: expected i/N such as 0/4, got ''"),
    ):
        r = CliRunner().invoke(app, ["generate", str(config), *args, "--no-progress"])
        assert isinstance(r.exception, ConfigError), (args, r.output)
        assert str(r.exception).startswith(says) and "\n" not in str(r.exception), (args, str(r.exception))
    assert not (tmp_path / "run").exists() and not any(tmp_path.glob("[bc]"))
    # a --set beside a bad value of the file's own: the file is named, not the --set
    bad = write(tmp_path, "model: {backend: transformers, path: smollm2-135m}\nsamples_per_prompt: lots\n", "bad.yaml")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(bad))}: field 'samples_per_prompt'"):
        load_config(bad, {"seed": 1, "model.batch_size": 2})


def test_a_run_whose_recorded_config_no_longer_reads_is_one_line(tmp_path):
    """A run.json written by another version (a key since removed) stopped a rerun with pydantic's traceback."""
    import json

    from harness.pipeline import check_resumable
    from harness.store import RunStore

    cfg = load_config(write(tmp_path, f"model: {{backend: transformers, path: smollm2-135m}}\n"
                                      f"output_dir: {tmp_path / 'run'}\n"))
    store = RunStore(tmp_path / "run")
    store.write_manifest({"config": {**cfg.model_dump(mode="json"), "retired_key": 1}})
    with pytest.raises(ConfigError) as e:
        check_resumable(store, cfg)
    assert str(e.value).startswith(f"{store.manifest_path}: its config does not read as this version's (field "
                                   "'retired_key': ") and "use a new output_dir" in str(e.value)
    store.write_manifest({"config": cfg.model_dump(mode="json")})
    check_resumable(store, cfg)  # the same config: resumes
    assert json.loads(store.manifest_path.read_text())["config"]["seed"] == 0


def test_a_rerun_with_another_model_path_or_wording_is_refused(tmp_path):
    """IDENTITY_FIELDS: another model (model.path) or another wording of the suite makes other stories; a rerun
    into the same output_dir with either would mix two runs' stories in one, so it is refused naming the field.
    A wording written out that is the suite's default is no other wording."""
    from harness.pipeline import check_resumable
    from harness.store import RunStore

    cfg = load_config(write(tmp_path, f"model: {{backend: transformers, path: smollm2-135m}}\n"
                                      f"output_dir: {tmp_path / 'run'}\n"))
    store = RunStore(tmp_path / "run")
    store.write_manifest({"config": cfg.model_dump(mode="json")})
    other_model = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": "other-model"})})
    for changed, field in ((other_model, "model.path"), (cfg.model_copy(update={"wording": "paper"}), "wording")):
        with pytest.raises(ConfigError, match=rf"run\.json: this run was made with a different {re.escape(field)} "):
            check_resumable(store, changed)
    # the suite's default wording written out gives the same prompts: the run resumes (it was refused, None vs
    # 'released'), and the other way round
    check_resumable(store, cfg.model_copy(update={"wording": "released"}))
    store.write_manifest({"config": cfg.model_copy(update={"wording": "released"}).model_dump(mode="json")})
    check_resumable(store, cfg)


@pytest.mark.parametrize("backend, runnable", [("cupy", "cupy_runnable"), ("triton", "triton_runnable")])
def test_a_kernel_backend_this_machine_cannot_run_stops_the_run_before_generating(tmp_path, monkeypatch, backend,
                                                                                  runnable):
    """statistics.backend cupy (or triton) where it cannot run failed in the statistics stage, after generating
    and labelling (or embedding): now before the first stage, in one line; a run without statistics passes."""
    from harness.audit.stages import run_stages
    from harness.kernels import _common

    monkeypatch.setattr(_common, runnable, lambda: False)
    for config in ("smoke.yaml", "homogeneity_smoke.yaml"):
        cfg = load_config(ROOT / "configs" / config, {"statistics.backend": backend, "output_dir": str(tmp_path / "run")})
        with pytest.raises(ConfigError, match=rf"^statistics.backend {backend}: needs {backend} and a CUDA device.* "
                                              r"this machine has none; use numpy or auto$"):
            run_stages(cfg, progress=False, echo=lambda line: None)
        assert not (tmp_path / "run").exists()
    def generating(*args, **kwargs):
        raise RuntimeError("generating")

    monkeypatch.setattr("harness.audit.stages.RUNNERS", {"generate": generating})
    cfg = load_config(ROOT / "configs" / "smoke.yaml", {"statistics.backend": backend, "stages": ["generate"]})
    with pytest.raises(RuntimeError, match="generating"):  # no statistics stage: the backend is not checked
        run_stages(cfg, progress=False, echo=lambda line: None)


@pytest.mark.parametrize("body, pattern", [
    ("stages: [generate, embed]\n", r"field 'stages': embed is no stage of a laissez-faire run \(suite laissez-faire\); "
                                    r"choose from generate, label, identities, statistics, report$"),
    ("embedding: {embedder: sbert}\n", r"field 'embedding': read by homogeneity runs only, and this is a laissez-faire "
                                       r"run \(suite laissez-faire\); remove it$"),
    ("homogeneity: {n_perm: 100}\n", r"field 'homogeneity': read by homogeneity runs only"),
    ("statistics: {n_boot: 200}\n", r"field 'statistics.n_boot': the paper mode draws no bootstrap; set "
                                    r"statistics.mode: principled for one; remove it$"),
    ("statistics: {seed: 3}\n", r"field 'statistics.seed': the paper mode draws no bootstrap"),
    ("label: {labeller: rules, precision: int8}\n", r"field 'label.precision': read by the encoder labeller only, and "
                                                    r"this run labels with rules; remove it, or set label.labeller: "
                                                    r"encoder$"),
    ("label: {labeller: llm, llm: {backend: transformers, path: smollm2-135m}, train_seeds: [0, 1]}\n",
     r"field 'label.train_seeds': read by the encoder labeller only, and this run labels with llm"),
    ("label: {train_jobs: 2}\n", r"field 'label.train_jobs': trains a soup's members at once, and one seed in "
                                 r"label.train_seeds trains one model; give more seeds, or drop it$"),
    ("label: {llm_attempts: 5}\n", r"field 'label.llm_attempts': read by the llm labeller only, and this run labels "
                                   r"with encoder; remove it, or set label.labeller: llm$"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nstages: [generate, label]\n",
     r"field 'stages': label is no stage of a homogeneity run \(suite homogeneity\); choose from generate, embed, "
     r"statistics, report$"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nlabel: {labeller: rules}\n",
     r"field 'label': read by laissez-faire runs only, and this is a homogeneity run"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nidentity: {name_mode: renormalised}\n", r"field 'identity': read by "
                                                                                          r"laissez-faire runs only"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nstatistics: {mode: principled}\n",
     r"field 'statistics.mode': a homogeneity run does not read it; remove it$"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nstatistics: {threshold_min: 10}\n",
     r"field 'statistics.threshold_min': a homogeneity run does not read it; remove it$"),
    ("suite: homogeneity\nsamples_per_prompt: 2\nstatistics: {threshold_max: 90}\n",
     r"field 'statistics.threshold_max': a homogeneity run does not read it; remove it$"),
])
def test_a_stage_or_field_the_runs_kind_never_reads_is_refused_at_load(tmp_path, body, pattern):
    """Each did nothing (an embedding: block in a laissez-faire config, n_boot in the paper mode) or stopped the run
    only when its stage began (stages: [embed] blamed --stages)."""
    p = write(tmp_path, "model: {backend: transformers, path: smollm2-135m}\n" + body)
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(p)
    assert str(e.value).startswith(f"{p}: ")


def test_the_fields_a_run_reads_pass_at_any_value_and_unread_ones_at_their_default(tmp_path):
    model = "model: {backend: transformers, path: smollm2-135m}\n"
    cfg = load_config(write(tmp_path, model + "statistics: {mode: principled, n_boot: 200, seed: 3}\n"
                                              "embedding: {embedder: minilm-l6}\n"))
    assert (cfg.statistics.n_boot, cfg.statistics.seed) == (200, 3)
    cfg = load_config(write(tmp_path, model + "suite: homogeneity\nsamples_per_prompt: 2\n"
                                              "statistics: {n_boot: 50, seed: 2, mode: paper}\n"))
    assert cfg.stages == ["generate", "label", "identities", "statistics", "report"]  # the default: all four stages
    assert load_config(ROOT / "configs" / "homogeneity_smoke.yaml").statistics.n_boot == 200
    # one threshold (min == max) is a sweep of one, not an empty one; train_jobs with a soup of seeds is read
    cfg = load_config(write(tmp_path, model + "statistics: {threshold_min: 50, threshold_max: 50}\n"
                                              "label: {train_jobs: 2, train_seeds: [0, 1]}\n"))
    assert (cfg.statistics.threshold_min, cfg.statistics.threshold_max, cfg.label.train_jobs) == (50, 50, 2)


def test_training_settings_an_encoder_already_trained_would_ignore_are_refused(tmp_path):
    """label.train_epochs, train_seeds and train_extra train the encoder on first use only: with an encoder already
    in label.model_dir (or the cache) they did nothing, silently. Refused where they differ from its meta.json."""
    import json

    from harness.audit.labels import encoder_dir

    model = tmp_path / "enc"
    (model / "encoder").mkdir(parents=True)
    for f in ("encoder/config.json", "encoder/model.safetensors", "encoder/tokenizer.json", "head.pt"):
        (model / f).write_text("{}")
    (model / "meta.json").write_text(json.dumps({"train": {"epochs": 16, "seeds": [0, 1]},
                                                 "files": ["project.jsonl", "laissez_faire_train150.jsonl"]}))
    head = f"model: {{backend: transformers, path: smollm2-135m}}\nlabel: {{model_dir: {model}, "
    for fields, says in (("train_epochs: 8", "label.train_epochs: the encoder at {m} was trained with 16, not 8, and a "
                                             "trained encoder is used as it is; delete it"),
                         ("train_seeds: [0]", "label.train_seeds: the encoder at {m} was trained with [0, 1], not [0]"),
                         ("train_extra: [more.jsonl]", "label.train_extra: the encoder at {m} was trained with the files "
                                                       "laissez_faire_train150.jsonl, project.jsonl, not ['more.jsonl']"),
                         # a meta.json without a precision is an earlier release's, trained in float32
                         ("train_precision: bfloat16", "label.train_precision: the encoder at {m} was trained with "
                                                       "float32, not bfloat16")):
        cfg = load_config(write(tmp_path, head + fields + "}\n"))
        with pytest.raises(ConfigError, match=re.escape(says.format(m=model))):
            encoder_dir(cfg)
    same = "train_epochs: 16, train_seeds: [0, 1], train_extra: [data/laissez_faire_train150.jsonl]"
    assert encoder_dir(load_config(write(tmp_path, head + same + "}\n"))) == model
    for precision in ("float32", "null"):  # null: the default, whatever the encoder was trained in
        assert encoder_dir(load_config(write(tmp_path, head + f"train_precision: {precision}}}\n"))) == model
    assert encoder_dir(load_config(write(tmp_path, head[:-2] + "}\n"))) == model  # nothing asked: used as it is


def test_models_prepare_with_a_file_where_its_folders_go_is_one_line(tmp_path, monkeypatch):
    """$HARNESS_CACHE/models, or the model's folder under it, a file: a FileExistsError traceback, or a
    NotADirectoryError after 37 s of conversion."""
    import pytest

    from harness import models
    from harness.errors import ConfigError

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "c1"))
    (tmp_path / "c1").mkdir()
    (tmp_path / "c1" / "models").write_text("x")
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'c1' / 'models'}: a file where harness keeps its prepared"):
        models.prepare("smollm2-135m")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "c2"))
    (tmp_path / "c2" / "models").mkdir(parents=True)
    (tmp_path / "c2" / "models" / "smollm2-135m").write_text("x")
    with pytest.raises(ConfigError, match=r"smollm2-135m: a file where harness keeps its prepared models"):
        models.prepare("smollm2-135m")


def test_a_config_path_that_is_missing_or_an_empty_file_is_named_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"gone\.yaml: config file not found; check the path$"):
        load_config(tmp_path / "gone.yaml")
    (tmp_path / "empty.yaml").write_text("")  # read as no keys: the first required one is named
    with pytest.raises(ConfigError, match=r"empty\.yaml: missing required field 'model'; add it$"):
        load_config(tmp_path / "empty.yaml")
