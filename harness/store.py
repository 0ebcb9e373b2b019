"""The run store: a run is a directory.

    run.json              manifest: resolved config, model identity, versions, host, times, throughput
    .run.json.lock        locked while a process updates run.json (the jobs of an array update it at once)
    generations/*.parquet generated stories, one row per (prompt_id, sample_idx)
    <stage>/.writers.lock held (shared) by every job while it writes shards of the stage; a whole-table stage
                          takes it only where no other job holds it
    <stage>/*.parquet     later stages' outputs (labels, statistics), keyed the same way
    invocations/*.json    one record per process that worked on the run (job-array shards)

Shards are written under a temporary name, synced to disk and renamed, so a killed process (or a
power loss) leaves either a whole shard or nothing. Resuming reads the keys already on disk and does
only the rest.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import ConfigError, DataError

KEY = ("prompt_id", "sample_idx")
STATUS, ERROR = "finish_reason", "error"  # rows with this status are failures to retry
#: What a stage's writers write through a temporary file while they hold its lock (``RunStore.writing``): shards
#: and tables. A record (``_stage.json``, an embedder's ``spec.json``) is written through one too, outside that
#: lock: a job alone at the lock must not delete it before its writer renames it.
PARTIAL_SUFFIXES = frozenset({".parquet", ".csv", ".npy"})


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sample_seed(run_seed: int, prompt_id: str, sample_idx: int) -> int:
    """The seed of one sample: a pure function of (run seed, prompt id, sample index)."""
    digest = hashlib.sha256(f"{run_seed}\0{prompt_id}\0{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def shard_of(prompt_id: str, sample_idx: int, n_shards: int) -> int:
    """Which of ``n_shards`` owns a sample: stable across machines and Python versions."""
    digest = hashlib.sha256(f"{prompt_id}\0{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % n_shards


def parse_shard(spec: str | None) -> tuple[int, int]:
    """``"i/N"`` -> (i, N) with 0 <= i < N; None -> (0, 1)."""
    if spec is None:  # "" is refused below: an empty --shard (an unset variable in a job script) is no shard 0/1
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ConfigError(f"--shard: expected i/N such as 0/4, got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ConfigError(f"--shard: need 0 <= i < N, got {spec!r}")
    return i, n


def file_in_the_way(path: Path | str) -> Path | None:
    """The nearest of ``path`` and the folders above it that exists and is no folder (so no folder can be
    made there), or None."""
    path = Path(path)
    for at in (path, *path.parents):
        if at.exists():
            return None if at.is_dir() else at
    return None


def make_folder(path: Path | str, option: str) -> Path:
    """Make the output folder ``path`` given by ``option`` (``--out``, ``field 'output_dir'``), or a ConfigError
    in one line naming it: a file at it or above it, or a folder the system will not make there (a read-only
    disk, /proc, no permission)."""
    path = Path(path)
    if (blocked := file_in_the_way(path)) is not None:
        where = "a file is there" if blocked == path else f"{blocked} above it is a file"
        raise ConfigError(f"{option} {path}: {where}; give a folder path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot make this folder ({e.strerror}); give a folder you can "
                          f"write to") from None
    return path


def run_folder(path: Path | str) -> Path:
    """Make a folder a run keeps (a stage's, ``invocations/``): a DataError in one line where a file stands at it or
    above it inside the run (a FileExistsError or NotADirectoryError traceback before)."""
    path = Path(path)
    if (blocked := file_in_the_way(path)) is not None:
        raise DataError(f"{blocked}: a file where the run keeps a folder ({path}); move the file away and rerun")
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_output_file(path: Path | str, option: str, sides: Sequence[str] = ()) -> Path:
    """An output file's path given by ``option``, checked before any work and its folder made: a ConfigError in
    one line where it is a folder, a device, pipe or socket (the file is written beside it and renamed over it:
    over /dev/null that replaces the device), or its folder cannot be made, or will not take a file of the longest
    name written for it: ``atomic_write``'s temporary file of the path, or of the path with one of the suffixes
    ``sides`` (files kept beside it, ``OUT.tmp.json``). The probe was 16 characters longer than the path's name,
    the temporary files up to 31, and a name too long for the file system was a traceback after the work."""
    path = Path(path)
    try:
        path.resolve()  # where it is checked against the inputs, a loop of symbolic links was a traceback
    except (RuntimeError, OSError) as e:  # (RuntimeError up to Python 3.12, OSError ELOOP after)
        why = "a loop of symbolic links" if isinstance(e, RuntimeError) or e.errno == errno.ELOOP else e.strerror
        raise ConfigError(f"{option} {path}: {why}; give a file path") from None
    if path.is_dir():
        raise ConfigError(f"{option} {path}: a folder; give a file path")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{option} {path}: not a regular file (a device, pipe or socket), which the output would be "
                          f"renamed over; give a file path")
    if (blocked := file_in_the_way(path.parent)) is not None:
        raise ConfigError(f"{option} {path}: {blocked} above it is a file; give a path in a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot make its folder ({e.strerror}); give a path you can write to") from None
    longest = max(("", *sides), key=len)
    prefix = f".tmp-{os.getpid()}-"
    try:  # a folder that will not take a file (read-only, no permission) found now, not after the work; the
        # probe's name is as long as atomic_write's (".tmp-<pid>-" and 8 random characters before "-<name>")
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=prefix, suffix=f"-{path.name}{longest}"):
            pass
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise ConfigError(f"{option} {path}: its name is too long for the file system once the "
                              f"{len(prefix) + 9 + len(longest)} characters of the files written beside it are "
                              f"added; give a shorter file name") from None
        raise ConfigError(f"{option} {path}: cannot write in its folder ({e.strerror}); give a path you can write "
                          f"to") from None
    return path


def fsync_dir(path: Path) -> None:
    """Make the renames in the folder ``path`` durable, where the platform can open a folder (not Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system that cannot sync a folder
        pass
    finally:
        os.close(fd)


def commit_file(tmp: Path, path: Path) -> None:
    """Rename the written file ``tmp`` to ``path`` durably: its data reach the disk before the rename (else a
    power loss can leave ``path`` renamed but empty or torn, which reads as committed) and the rename after."""
    fd = os.open(tmp, os.O_RDWR)  # Windows syncs only a file open for writing
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def atomic_write(path: Path, write: Callable[[Path], Any]) -> Path:
    """Write the file ``path`` as ``write(tmp)`` writes a temporary file beside it (hidden,
    ``.tmp-<pid>-<random>-<name>``: not read as an output, the writer's own, so two writers of one path, say
    two ``harness report --out`` into one folder, do not write into each other's; the name ends as ``path``
    does, for writers that pick a format by it), then commit it with ``commit_file``: a power loss leaves the
    old file or the whole new one, and of two writers the last to commit wins. The file gets the mode a plain
    write would give it: a new one the umask's, a rewritten one its own (run.json made 0600, as ``mkstemp``
    once made it, was unreadable to the other users of a shared run folder). A write that raises leaves no
    temporary file."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        write(tmp)
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o777)  # an existing file keeps its mode
        except FileNotFoundError:
            pass  # a new one keeps the mode open() gave it under the umask
        commit_file(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` by ``atomic_write``: run.json, stage records, a model's meta.json."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


class _Editing(threading.local):
    """The manifest locks this thread holds: a second flock of one of them would wait for the first forever."""

    def __init__(self) -> None:
        self.locks: set[Path] = set()


_editing = _Editing()


def _unreadable(path: Path, e: Exception) -> DataError:
    return DataError(f"{path}: unreadable shard ({e}); delete it and rerun to regenerate its rows")


#: The stage lock files this process holds open (``RunStore.writing``). A child forked meanwhile (vLLM's engine
#: workers fork by default) closes its copies at once: a flock belongs to the open file, so a copy held by an engine
#: process that outlives its job kept the job's shard locked, and a requeued task was refused while it lived.
_held_locks: set[Any] = set()


def _close_held_locks() -> None:
    for f in list(_held_locks):
        with contextlib.suppress(OSError):
            f.close()
    _held_locks.clear()


os.register_at_fork(after_in_child=_close_held_locks)


@contextlib.contextmanager
def _lock_file(path: Path) -> Iterator[Any]:
    """``path`` open for a lock (read and append: a shared flock on NFS needs the file open for reading) and in
    ``_held_locks`` until it closes."""
    with open(path, "a+") as f:
        _held_locks.add(f)
        try:
            yield f
        finally:
            _held_locks.discard(f)


def _shares_work(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two jobs' shards (i, n) hold stories in common: the same shard, one of them every story (n = 1), or
    shards of two counts (``shard_of`` spreads a count's shards over every other's)."""
    return a == b or a[1] != b[1] or a[1] == 1


def _held_share(d: Path, shard: tuple[int, int]) -> tuple[int, int] | None:
    """The shard of a running job (one holding its lock in stage folder ``d``) that overlaps ``shard``; None: none."""
    for path in sorted(d.glob(".shard-*of*.lock")):
        tag = path.name[len(".shard-"):-len(".lock")].split("of")
        if not (len(tag) == 2 and all(t.isdigit() for t in tag)):
            continue
        other = (int(tag[0]), int(tag[1]))
        if not _shares_work(shard, other):
            continue
        with open(path, "a+") as probe:  # taken, it is released on closing; shared, so two probes never clash
            try:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return other
            except OSError:  # a file system without flock (some network mounts): no check, as before
                return None
    return None


def _share_taken(d: Path, shard: tuple[int, int], other: tuple[int, int]) -> DataError:
    theirs = "every story" if other[1] == 1 else f"shard {other[0]}/{other[1]}"
    mine = "this job" if shard[1] == 1 else f"this job's shard {shard[0]}/{shard[1]}"
    return DataError(f"{d}: another job is writing {theirs} of this stage now ({mine} would do its stories again); "
                     f"let it finish, or give each job of an array its own --shard i/N of one N")


def _claim_shard(d: Path, shard: tuple[int, int], alone: bool) -> contextlib.AbstractContextManager:
    """The lock of ``shard`` in stage folder ``d``, held exclusively while the context is open (``RunStore.writing``;
    called under the manifest's lock, where every job takes its own, so no two jobs both find the other's free).
    Beside another writer, a running job's lock whose shard overlaps this one stops the job (``_held_share``)."""
    if not alone and (other := _held_share(d, shard)) is not None:
        raise _share_taken(d, shard, other)
    return _holding(d / f".shard-{shard[0]}of{shard[1]}.lock", d, shard)


@contextlib.contextmanager
def _holding(path: Path, d: Path, shard: tuple[int, int], wait: float = 2.0) -> Iterator[None]:
    """``path`` locked exclusively. No job holds it (it overlaps itself), so it is free or held for a moment by
    another job's probe (``check_share``); it is tried for ``wait`` seconds, never waited for: this runs under the
    manifest's lock, which every other job's update waits for."""
    with _lock_file(path) as f:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:  # a job that checked nothing (a file system that fails the probe)
                    raise _share_taken(d, shard, shard) from None
                time.sleep(0.01)
            except OSError:  # a file system without flock
                break
        yield


class RunStore:
    """Reads and writes one run directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / "run.json"

    def stage_dir(self, stage: str) -> Path:
        return self.root / stage

    # -- manifest ---------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        """run.json's contents, {} where there is none yet."""
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except NotADirectoryError:
            raise DataError(f"{self.root}: a file, not a run directory; give the folder a run writes "
                            f"(its output_dir)") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise DataError(f"{self.manifest_path}: not valid JSON; restore it or start a new output_dir") from None
        if not isinstance(manifest, dict):
            raise DataError(f"{self.manifest_path}: not a run's record (a JSON object); restore it or start a new "
                            f"output_dir")
        return manifest

    def read_run(self) -> dict[str, Any]:
        """The manifest of a run that exists, for the readers of finished runs (``harness report``): a DataError
        naming what is wrong where the folder is missing, a file, or holds no run.json or an empty one."""
        if not self.root.exists():
            raise DataError(f"{self.root}: not found; give a run directory (the output_dir of `harness run`)")
        manifest = self.read_manifest()
        if not manifest:
            held = "an empty run.json" if self.manifest_path.exists() else "no run.json"
            raise DataError(f"{self.root}: {held}, so it is no run directory; give the output_dir of `harness run`")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        make_folder(self.root, "output_dir")
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")

    @contextlib.contextmanager
    def edit_manifest(self) -> Iterator[dict[str, Any]]:
        """The manifest, to change in place and written back on leaving, under an exclusive lock on
        ``.run.json.lock`` beside it: the jobs of an array update it at the same time, and each reading it
        and writing it back unlocked would write over the updates another made in between. Not re-entrant: called
        again inside it (``update_manifest`` too) by the same thread, it raises instead of waiting for itself."""
        make_folder(self.root, "output_dir")
        path = (self.root / ".run.json.lock").resolve()
        held = _editing.locks
        if path in held:
            raise RuntimeError(f"{self.manifest_path}: edit_manifest entered again inside itself, which would wait "
                               f"for its own lock forever; change the manifest the outer edit_manifest gives instead")
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            held.add(path)
            try:
                manifest = self.read_manifest()
                yield manifest
                self.write_manifest(manifest)
            finally:
                held.discard(path)

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        with self.edit_manifest() as manifest:
            manifest.update(fields)
        return manifest

    def record_invocation(self, record: dict[str, Any]) -> Path:
        d = self.root / "invocations"
        run_folder(d)
        path = d / f"{record.get('stage', 'run')}-{record.get('shard', '0of1')}-{record['invocation_id']}.json"
        atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
        return path

    # -- shards -----------------------------------------------------------------------------
    def clean_partial(self, stage: str) -> int:
        """Delete the temporary shards and tables (``PARTIAL_SUFFIXES``) killed writers left behind; returns how
        many. Only for a job alone at the stage (``writing``): another job's may be a shard it is committing. A
        record's temporary file is kept: its writer may be renaming it now."""
        d = self.stage_dir(stage)
        if not d.is_dir():
            return 0
        stale = [p for p in d.glob(".tmp-*") if p.suffix in PARTIAL_SUFFIXES]
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)

    @contextlib.contextmanager
    def writing(self, stage: str, claim: Callable[[dict[str, Any], bool], None] | None = None,
                shard: tuple[int, int] | None = None) -> Iterator[None]:
        """Held by a job for as long as it writes shards of ``stage``: a shared lock on ``<stage>/.writers.lock``,
        taken under the manifest's lock. ``claim(manifest, alone)`` is called first under that lock (``alone``: no
        other job holds the stage's) to check the settings the run recorded against the job's and to record them:
        checked before the lock, two jobs started together both passed and then wrote with different settings. A
        job alone deletes every temporary file of the stage, those a killed job of another shard count left too;
        beside another job, none: the other's may be a shard it is committing, under this job's shard tag too (a
        requeued array task beside the one still running). The next job alone deletes what is left (hidden files,
        never read).

        ``shard`` (i, n): the job's share of the stage's work, held as an exclusive lock on ``<stage>/.shard-<i>of<n>
        .lock`` while it writes. A job whose share overlaps one a running job holds (the same shard, every story
        against any shard, or shards of two counts) stops with a one-line DataError (``claim`` has checked the
        settings first): two jobs without ``--shard``, a command started twice or a requeued array task beside the
        one still running, each did the whole share again, hours of a GPU, for rows the reads then dropped."""
        make_folder(self.root, "output_dir")  # a run's first write: a folder that cannot be made is named
        d = self.stage_dir(stage)
        run_folder(d)
        # the shard's lock is released first, on leaving (a job alone at the writers' lock holds no shard's)
        with _lock_file(d / ".writers.lock") as lock, contextlib.ExitStack() as share:
            with self.edit_manifest() as manifest:
                try:  # every other job's test waits for the manifest's lock, so two jobs never both find they are alone
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    alone = True
                except BlockingIOError:
                    alone = False
                if claim is not None:
                    claim(manifest, alone)
                if shard is not None:
                    share.enter_context(_claim_shard(d, shard, alone))
                if alone:
                    self.clean_partial(stage)
                fcntl.flock(lock, fcntl.LOCK_SH)  # no wait: a job holds it exclusively only under the manifest's lock
            yield

    def check_share(self, stage: str, shard: tuple[int, int]) -> None:
        """A DataError where a running job writes a shard of ``stage`` that overlaps ``shard``: a job checks before it
        loads a model, and ``writing`` again under the run's lock, where it counts."""
        if (other := _held_share(self.stage_dir(stage), shard)) is not None:
            raise _share_taken(self.stage_dir(stage), shard, other)

    def write_shard(self, stage: str, rows: Sequence[dict[str, Any]], tag: str, schema: pa.Schema | None = None) -> Path:
        """Write ``rows`` as one Parquet shard, atomically."""
        d = self.stage_dir(stage)
        run_folder(d)
        table = pa.Table.from_pylist(list(rows), schema=schema)
        name = f"{tag}-{utcnow().replace(':', '').replace('+0000', 'Z')}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = d / f".tmp-{name}"
        pq.write_table(table, tmp)
        commit_file(tmp, d / name)
        return d / name

    def shard_paths(self, stage: str) -> list[Path]:
        d = self.stage_dir(stage)
        # a shard being written (or left by a killed writer) is a hidden .tmp- file: not committed, not read
        return sorted(p for p in d.glob("*.parquet") if not p.name.startswith(".")) if d.is_dir() else []

    def read_keys(self, stage: str, key: Iterable[str] = KEY) -> set[tuple[Any, ...]]:
        """The keys already done for ``stage``.

        A row whose ``finish_reason`` is ``"error"`` (a failed request, e.g. a server outage) is
        not done: a rerun retries its key.
        """
        key = tuple(key)
        done: set[tuple[Any, ...]] = set()
        for p in self.shard_paths(stage):
            try:
                has_status = STATUS in pq.read_schema(p).names
                t = pq.read_table(p, columns=list(key) + ([STATUS] if has_status else []))
            except (pa.ArrowInvalid, OSError) as e:
                raise _unreadable(p, e) from None
            cols = [t.column(k).to_pylist() for k in key]
            if has_status:
                ok = [r != ERROR for r in t.column(STATUS).to_pylist()]
                done.update(k for k, good in zip(zip(*cols), ok) if good)
            else:
                done.update(zip(*cols))
        return done

    def read_shards(self, stage: str, columns: Sequence[str], paths: Sequence[Path] | None = None,
                    required: Sequence[str] = KEY):
        """Each shard of ``stage`` (``paths``: these, in this order; default every one, as ``shard_paths`` lists them)
        as a DataFrame of those of ``columns`` it holds, one at a time and not deduplicated, so a stage of any size is
        read with one shard in memory (``read_stage`` reads them whole, one row per key). A shard without one of
        ``required`` is unreadable."""
        for p in self.shard_paths(stage) if paths is None else paths:
            try:
                names = pq.read_schema(p).names
                if missing := [c for c in required if c not in names]:
                    raise pa.ArrowInvalid(f"no column {', '.join(missing)}")
                table = pq.read_table(p, columns=[c for c in columns if c in names])
            except FileNotFoundError:
                raise DataError(f"{p}: deleted while it was read (by another job?); rerun") from None
            except (pa.ArrowInvalid, OSError) as e:
                raise _unreadable(p, e) from None
            yield table.to_pandas()

    def read_stage(self, stage: str, key: Iterable[str] = KEY, columns: list[str] | None = None):
        """All rows of a stage as a DataFrame, one row per key.

        The first row written wins, except that a good row beats an error row
        (``finish_reason == "error"``) of the same key, so a retried key reads as its retry.
        """
        import pandas as pd

        paths = self.shard_paths(stage)
        if not paths:
            return pd.DataFrame(columns=columns or list(key))
        frames = []
        for p in paths:
            try:
                names = pq.read_schema(p).names
                cols = None if columns is None else list(dict.fromkeys(columns + [k for k in (*key, STATUS) if k in names]))
                frames.append(pq.read_table(p, columns=cols).to_pandas())
            except (pa.ArrowInvalid, OSError) as e:
                raise _unreadable(p, e) from None
        df = pd.concat(frames, ignore_index=True)
        key = [k for k in key if k in df.columns]
        if STATUS in df.columns:
            failed = df[STATUS].eq(ERROR)
            if failed.any():
                df = df.assign(_failed=failed).sort_values("_failed", kind="stable").drop(columns="_failed")
        df = df.drop_duplicates(key, keep="first").sort_values(key).reset_index(drop=True)
        if columns is not None:
            df = df[[c for c in columns if c in df.columns]]
        return df
