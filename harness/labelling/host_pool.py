"""The host side of the encoder labeller beside a GPU: worker processes that tokenise and decode.

The model process (the caller's) runs only the forward pass, in a thread of its own; ``HostPool.label`` streams
batches through the workers. Each worker has an inbox of its own, and the worker that tokenised a batch also
decodes it: it keeps the batch's stories and encodings in between, so only the model's input arrays come to the
model process and only its probabilities go back. (Through a shared process pool, each batch's stories and
encodings were pickled to the model process and back to whichever worker decoded them: about 90 us per story on a
2-core Xeon, a tenth of the host work.) Every worker holds up to ``DEPTH`` batches, so while work remains it never
waits for the model process, and batches flow on across the caller's windows without the pool draining between
them.

Messages are read as they come, by a reader thread on each side, and a worker tokenises a new batch before it
decodes the ones it holds (``_tokenising_first``). A message larger than a pipe's buffer (a batch's probabilities,
its model inputs) is written only as fast as its reader takes it, and the messages behind it wait: read only
between batches, a batch given to a worker waited behind the probabilities of its other batches until it had
decoded one (a second at batch 1,024), and then the worker's batches were all with the model at once. With the
model's time emulated (``benchmarks/labelling.py --host-layout N --device-us-per-story 500``, one worker on a
2-core machine, the three versions in turn in one run) the worker was busy 88-89% of the time before, 95-96% with
the reader threads, and 100% with the forward pass in a thread of its own too (``HostPool.label``), labelling
1.08-1.09x the stories per second.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Any

from harness.labelling.base import (StoryInput, StoryLabels, error_status, failed, label_or_keep, probe_story,
                                    warn_one_at_a_time)

#: batches a worker holds at once (tokenised or waiting to be, waiting for probabilities, or decoding)
DEPTH = 3
#: seconds to wait for a worker to start (it imports transformers and loads spaCy's parser)
START_TIMEOUT_S = 300.0
#: the error of a call still open when its pool closed (``HostPool.close``)
CLOSED_DURING_CALL = "encoder labeller: the host pool was closed during this call"


class HostWorkerError(RuntimeError):
    """A host worker process failed or exited; the pool is closed and the next call starts a new one."""


class HostPool:
    """``workers`` processes, each tokenising with the tokenizer in ``tokenizer_dir`` and decoding with
    ``decoder`` (a ``WordDecoder``)."""

    def __init__(self, workers: int, tokenizer_dir: str, decoder: Any) -> None:
        import multiprocessing as mp

        if workers < 1:
            raise ValueError(f"a host pool needs at least one worker, got {workers}")
        ctx = mp.get_context("spawn")
        self.busy = False  # a call of ``label`` in progress
        self._closed = False  # ``close`` ran: its queues take nothing more
        self._results = ctx.Queue()
        # the workers' messages, read as they come by a thread of this process (``_read_results``), up to the end of
        # the pipe, which ``close`` brings about (``_stopping`` tells it that the end is the pool's)
        self._arrived: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._reader = threading.Thread(target=_read_results, args=(self._results, self._arrived, self._stopping),
                                        name="harness-host-results", daemon=True)
        self._reader.start()
        self._inboxes = [ctx.Queue() for _ in range(workers)]
        self._procs = [ctx.Process(target=_serve, args=(tokenizer_dir, decoder, inbox, self._results),
                                   daemon=True, name=f"harness-host-{i}") for i, inbox in enumerate(self._inboxes)]
        try:
            for p in self._procs:
                p.start()
            for _ in self._procs:
                self._receive(START_TIMEOUT_S)
        except BaseException:
            self.close(wait=False)
            raise

    @property
    def alive(self) -> bool:
        """Whether every worker process still runs (one killed between two calls fails the next one's first
        message)."""
        return all(p.is_alive() for p in self._procs)

    @property
    def closed(self) -> bool:
        """Whether ``close`` ran (a call that failed or stopped early closes its pool)."""
        return self._closed

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (for benchmarks that read their CPU time)."""
        return [p.pid for p in self._procs if p.pid is not None]

    def label(self, batches: Iterable[list[StoryInput]],
              forward: Callable[..., Any]) -> Iterator[list[StoryLabels]]:
        """Labels of each batch, in order. ``forward(ids, attention_mask, token_type_ids)`` maps a batch's
        collated NumPy arrays to its (batch, tokens, slots) probabilities; it runs in this process, in a thread of
        its own, on each batch as its tokenisation arrives, in that order, and a story it fails on is kept with the
        error as its status (``forward_or_keep``). The thread lets this one hand out batches, take labels and
        yield them (and the caller write them) while the device works: in one thread those waited for each forward
        pass. An error reading the input (the next batch) is raised after the batches handed out before it are
        yielded, as the serial path yields them, and the pool carries on. On any other failure the pool closes (no
        result of an unfinished call can reach a later one)."""
        if not self._procs:  # closed (by ``close``, or by a failed call): it yielded no batch, and said nothing
            raise HostWorkerError("encoder labeller: this host pool is closed; start a new one")
        if self.busy:  # every call numbers its batches from 0 on the one results queue: a second call took the first's
            raise RuntimeError("a host pool labels one call at a time; finish or close the call in progress first")
        # before the call takes the pool: an input that is not iterable left it busy for good (every later call
        # refused), as it was set outside the try that clears it
        todo = iter(batches)
        owner: dict[int, int] = {}  # batch -> the worker that holds it
        done: dict[int, list[StoryLabels]] = {}
        sent = yielded = 0
        more = True
        unread: Exception | None = None  # the input's error, raised once the batches handed out before it are yielded
        finished = False
        # batches given out and not yet yielded: at most DEPTH a worker, so a slow batch (or a dead worker's)
        # holds back the others' results in `done` only so far, not the whole input
        cap = DEPTH * len(self._procs)
        hungry: list[int] = []  # workers that finished a batch while the cap was reached
        model = ThreadPoolExecutor(1, thread_name_prefix="harness-forward")
        self.busy = True

        def run_forward(w: int, bid: int, arrays: tuple) -> None:
            try:
                probs = forward_or_keep(forward, *arrays)
                if self._closed:  # its worker is gone, and its inbox takes nothing
                    raise HostWorkerError(CLOSED_DURING_CALL)
                self._inboxes[w].put(("decode", bid, probs))
            except BaseException as e:  # noqa: BLE001 - raised by this call's next receive
                self._arrived.put(("error", bid, e))

        def give(w: int) -> None:
            nonlocal sent, more, unread
            if more and sent - yielded >= cap:
                hungry.append(w)
                return
            if not more:
                return
            try:
                batch = next(todo, None)
                batch = None if batch is None else list(batch)
            except Exception as e:  # noqa: BLE001 - raised after the batches handed out (a bad row, a file unread)
                # raised at once, it lost the batches labelled or in flight, and with them the caller's whole window
                # (iter_label yields a window when all its batches are in)
                unread, more = e, False
                return
            if batch is None:
                more = False
                return
            if self._closed:
                raise HostWorkerError(CLOSED_DURING_CALL)
            try:
                self._inboxes[w].put(("encode", sent, batch))
            except (OSError, ValueError):  # closed between the check and the put
                if self._closed:
                    raise HostWorkerError(CLOSED_DURING_CALL) from None
                raise
            owner[sent] = w
            sent += 1

        def end() -> None:
            """The call's end: the model's thread stops and the pool takes the next call."""
            nonlocal finished
            finished = True
            model.shutdown(wait=True)
            self.busy = False

        try:
            for _ in range(DEPTH):
                for w in range(len(self._procs)):
                    give(w)
            while yielded < sent:
                kind, bid, payload = self._receive()
                w = owner[bid]
                if kind == "encoded":  # the collated arrays and each row's story
                    model.submit(run_forward, w, bid, payload)
                    continue
                del owner[bid]
                done[bid] = payload
                give(w)
                while yielded in done:
                    labels = done.pop(yielded)
                    # Counted before the yield, and the workers it frees fed, so that at the last batch the input's
                    # end is known and the call ends before it: a caller that takes every label and asks for nothing
                    # more (zip, islice) left the pool busy, and torn down (workers terminated) when it dropped the
                    # spent iterator.
                    yielded += 1
                    while hungry and sent - yielded < cap:
                        give(hungry.pop(0))
                    if yielded == sent and not more:
                        end()
                    yield labels
            if not finished:  # no batch at all
                end()
        finally:
            if not finished:  # an error here, in a worker, or the caller stopped early: nothing to wait for
                model.shutdown(wait=False, cancel_futures=True)
                self.busy = False
                self.close(wait=False)
        if unread is not None:
            raise unread

    def _receive(self, timeout: float | None = None) -> tuple[str, int, Any]:
        """The next message of any worker; raises if a worker reported an error or exited, or the pool closed."""
        waited = 0.0
        while True:
            if self._closed:
                # by ``close`` while this call was open (the encoder labeller replacing a pool whose worker died,
                # ``close`` with an iterator open): it waited for ever, as a closed pool's workers are not checked
                raise HostWorkerError(CLOSED_DURING_CALL)
            try:
                kind, bid, payload = self._arrived.get(timeout=1.0)
            except queue.Empty:
                self._raise_if_dead()
                waited += 1.0
                if timeout is not None and waited >= timeout:
                    raise HostWorkerError(f"encoder labeller: host workers sent nothing for {timeout:.0f} s") from None
                continue
            if self._closed:  # an error of its closing (a queue closed under the forward thread) included
                raise HostWorkerError(CLOSED_DURING_CALL)
            if kind == "error":
                raise payload
            self._raise_if_dead()  # at each message too: the others' messages kept the queue from running dry
            return kind, bid, payload

    def _raise_if_dead(self) -> None:
        dead = [p for p in self._procs if not p.is_alive()]
        if dead:
            raise HostWorkerError(f"encoder labeller: host worker {dead[0].name} exited with code "
                                  f"{dead[0].exitcode}") from None

    def close(self, wait: bool = True) -> None:
        """Stop the workers: after the batches they hold (``wait``), or at once. Again, nothing: a call of ``label``
        that stopped early closed its pool, and its owner closes it too. A call still open on the pool raises
        ``HostWorkerError`` at its next step."""
        if self._closed:
            return
        self._closed = True
        for inbox, p in zip(self._inboxes, self._procs):
            if wait and p.is_alive():
                try:
                    inbox.put(None)
                except (OSError, ValueError):
                    pass
        for p in self._procs:
            if p.pid is not None:
                p.join(timeout=5 if wait else 0)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=5)
        # The workers' write ends of the results pipe went with them: closing this process's ends it, and the reader
        # stops there, after the messages before it. A "stop" put on the queue started this process's feeder thread
        # for it, which waited for ever on the write lock of a worker terminated while it wrote (one thread left
        # per such close).
        self._stopping.set()
        self._results._writer.close()
        self._reader.join(timeout=5)
        if not self._reader.is_alive():  # (one still reading keeps its end: closed under it, the fd could be reused)
            self._results._reader.close()
        for q in (*self._inboxes, self._results):
            q.cancel_join_thread()
            q.close()
        self._procs = []


def _read_results(results: Any, arrived: queue.Queue, stopping: threading.Event) -> None:
    """The model process's reader thread: each worker's message, as it comes, into ``arrived``, up to the end of the
    pipe, which is the pool's own once ``stopping`` is set (``HostPool.close``; the module's docstring says why the
    thread: read only between forward passes, a worker's labels, and with them the next batch it is given, waited
    behind the other workers' model inputs). A message that cannot be read (a worker killed while it wrote) is the
    pool's error."""
    try:
        while True:
            arrived.put(results.get())
    except Exception as e:  # noqa: BLE001 - raised by the pool's next receive
        if not stopping.is_set():
            arrived.put(("error", -1, HostWorkerError(f"encoder labeller: a host worker's message could not be read: "
                                                      f"{type(e).__name__}: {e}")))


def forward_or_keep(forward: Callable[..., Any], ids: Any, am: Any, tt: Any, owner: Sequence[int] | None = None,
                    probe: tuple[Any, Any, Any] | None = None) -> tuple[Any, dict[int, str]]:
    """(probabilities, {row: error status}) of a collated batch: ``forward(ids, am, tt)`` and no errors, or
    where the batch fails (a GPU out of memory, any error of the model), each row again alone, without its
    padding, the rows that fail alone too left out with their error (their rows zeros; None for the
    probabilities of a batch whose every row failed). ``owner``: each row's story (a long story's windows are
    rows of one story), by default a story a row. Where every row of a batch fails alone, the fault is the model's
    or the device's (a CUDA error that stays), not the stories', unless ``probe``, the collated arrays of a story
    any working model reads (``probe_story``), passes: without a probe, or where it fails too, the error is raised,
    since the label stage keeps a story's "labeller error" as its final labels; where the probe passes, the stories
    are at fault and kept with their errors, as ``label_or_keep`` tells them apart. (The windows of one story that
    all fail are that story's error without a probe, as the story of one window is.)"""
    try:
        return forward(ids, am, tt), {}
    except Exception as e:  # noqa: BLE001 - the stories are tried alone below
        error = error_status(e)
    # retried after the except block, which holds the failed pass's tensors (label_or_keep)
    probs, errors = None, {}
    if len(ids) == 1:
        errors = {0: error}
    else:
        warn_one_at_a_time(error)
        import numpy as np

        lengths = am.sum(1).tolist()
        stories = len(set(owner)) if owner is not None else len(lengths)
        for i, n in enumerate(lengths):
            try:
                p = forward(ids[i:i + 1, :n], am[i:i + 1, :n], tt[i:i + 1, :n])[0]
            except Exception as e:  # noqa: BLE001 - kept on the story
                if probs is None and i == len(lengths) - 1 and stories > 1 and (
                        probe is None or not _passes(forward, *probe)):
                    raise
                errors[i] = error_status(e)
                continue
            if probs is None:
                probs = np.zeros((*ids.shape, p.shape[-1]), dtype=p.dtype)
            probs[i, :n] = p
    if probs is None and probe is not None and not _passes(forward, *probe):
        # one story (--batch-size 1, or its windows) that fails where the probe fails too: the device's fault,
        # raised where it fails again (every story was kept as "labeller error", exit 0, and never retried)
        return forward(ids, am, tt), {}
    return probs, errors


def _passes(call: Callable[..., Any], *args: Any) -> bool:
    """Whether ``call(*args)`` returns (a probe's pass of the model or the tokenizer)."""
    try:
        call(*args)
    except Exception:  # noqa: BLE001 - the machine's failure, which the caller raises on the story
        return False
    return True


def encode_or_keep(encode: Callable[[list[StoryInput]], list], stories: list[StoryInput]
                   ) -> tuple[list, dict[int, str]]:
    """(``encode(stories)`` of the stories it reads, {story's index: error status} of those it does not): a batch
    whose tokenisation fails is tokenised story by story, and a story that fails alone is kept with its error
    (beside a GPU, one such story failed its whole call; the CPU paths keep it through ``label_or_keep``). Where
    every story of several fails, and a plain story with their roles fails too, the tokenizer is at fault: that
    error is raised; for a batch of one, the story's error, as ``label_or_keep`` tells a batch of one apart."""
    try:
        return encode(stories), {}
    except Exception as e:  # noqa: BLE001 - the stories are tried alone below
        error = error_status(e)
    if len(stories) == 1:
        if not _passes(encode, [probe_story(stories[0].roles)]):
            # (a tokenizer that fails on every story was kept as each story's "labeller error" at --batch-size 1)
            return encode(stories), {}  # raises where it fails again
        return [], {0: error}
    warn_one_at_a_time(error)
    encoded: list = []
    unread: dict[int, str] = {}
    for i, story in enumerate(stories):
        try:
            encoded += encode([story])
        except Exception as e:  # noqa: BLE001 - kept on the story
            unread[i] = error_status(e)
    if len(unread) == len(stories):
        encode([probe_story(stories[-1].roles)])  # raises where the tokenizer fails on any story
    return encoded, unread


def _portable(exc: BaseException) -> BaseException:
    """``exc`` with the worker's traceback as a note, if it survives pickling; else a ``HostWorkerError``
    carrying its text."""
    import traceback

    where = "in a host worker process:\n" + "".join(traceback.format_exception(exc)).rstrip()
    try:
        exc.add_note(where)
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return HostWorkerError(f"{type(exc).__name__}: {exc}\n{where}")


def exit_with_parent() -> None:
    """Make this worker process end when the process that started it ends, however it ends: a parent
    killed with SIGKILL runs no cleanup, and a worker waiting on its queue would wait, holding its
    model, for ever. A daemon thread waits on the parent's sentinel and exits the process."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="harness-exit-with-parent", daemon=True).start()


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """A worker's start (its imports, its model) with Ctrl-C ignored: the terminal's SIGINT reaches every process of
    the group, and each worker starting printed a traceback of its imports (hundreds of lines); the process that
    started them stops them. Ctrl-C works as before once the worker runs: the handler it inherited is restored (a
    worker of a process that ignores SIGINT, as a shell's background job does, ignores it too; it died of the
    Ctrl-C its parent ignored, and failed the run)."""
    import signal

    if threading.current_thread() is not threading.main_thread():  # only a process's main thread sets handlers
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if before is None else before)


def _read_inbox(inbox: Any, local: queue.Queue) -> None:
    """A worker's reader thread: each message of the model process, as it comes, into ``local``, up to the stop
    (None), which it passes on; an inbox that closes (the model process gone) stops it too."""
    try:
        while (msg := inbox.get()) is not None:
            local.put(msg)
    except (EOFError, OSError):
        pass
    finally:
        local.put(None)


def _tokenising_first(inbox: Any) -> Iterator[tuple[str, int, Any]]:
    """A worker's messages from ``inbox`` (a ``queue.Queue`` its reader thread fills), up to the stop (None) and
    then those that came before it, tokenising first: of the messages waiting, the oldest "encode" goes before any
    "decode", so that a new batch reaches the model while this worker decodes the ones it holds; decodings keep
    their order."""
    waiting: deque = deque()
    stopped = False
    while True:
        if not waiting and not stopped:
            msg = inbox.get()
            if msg is None:
                return
            waiting.append(msg)
        while not stopped:  # take what else has come, without waiting
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                break
            if msg is None:
                stopped = True
            else:
                waiting.append(msg)
        if not waiting:
            return
        first = next((i for i, m in enumerate(waiting) if m[0] == "encode"), 0)
        msg = waiting[first]
        del waiting[first]
        yield msg


def _serve(tokenizer_dir: str, decoder: Any, inbox: Any, results: Any) -> None:
    """A worker: tokenise batches, keep them, decode each when its probabilities come."""
    exit_with_parent()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        with starting():
            import numpy as np
            from transformers import AutoTokenizer

            from harness.labelling import role_agent
            from harness.labelling.encoder import _collate_np, _encode_windows, _merge_windows, _window_rows

            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            if decoder.action_check:
                role_agent.load()
    except BaseException as e:  # noqa: BLE001 - reported to the model process, which raises it
        results.put(("error", -1, _portable(e)))
        return
    results.put(("ready", -1, None))
    held: dict[int, tuple[list[StoryInput], list]] = {}
    # per set of roles: the probe story (``probe_story``), its encoding and its collated model inputs, or None where
    # the tokenizer fails on it; a batch with one story for the model sends them along, so that the model process
    # tells a broken device from a bad story (``forward_or_keep``), and its decoding is told apart alike
    probes: dict[tuple, tuple[StoryInput, Any, tuple] | None] = {}

    def probe_of(roles: tuple) -> tuple[StoryInput, Any, tuple] | None:
        if roles not in probes:
            story = probe_story(roles)
            try:
                enc = _encode_windows(tokenizer, [story], decoder.max_length)
                probes[roles] = (story, enc[0], _collate_np(_window_rows(enc), tokenizer.pad_token_id))
            except Exception:  # noqa: BLE001 - no probe: the story's error is kept, as before
                probes[roles] = None
        return probes[roles]

    def decode_probe(roles: tuple, slots: int, dtype: Any) -> tuple | None:
        """The probe story as a decoder's item, with probabilities of zero (a working decoder labels it, names or
        none)."""
        if (known := probe_of(roles)) is None:
            return None
        story, enc, _ = known
        zeros = [np.zeros((len(w.input_ids), slots), dtype=dtype) for w in _window_rows([enc])]
        merged_e, merged_p = _merge_windows([enc], zeros)
        return story, merged_e[0], merged_p[0]

    local: queue.Queue = queue.Queue()
    threading.Thread(target=_read_inbox, args=(inbox, local), name="harness-host-inbox", daemon=True).start()
    for kind, bid, payload in _tokenising_first(local):
        try:
            if kind == "encode":
                encoded, unread = encode_or_keep(lambda batch: _encode_windows(tokenizer, batch, decoder.max_length),
                                                 payload)
                if len(unread) == len(payload):  # nothing for the model: the batch's labels at once
                    results.put(("labels", bid, [failed(s, unread[i]) for i, s in enumerate(payload)]))
                    continue
                held[bid] = (payload, encoded, unread)
                rows_of = [i for i, e in enumerate(encoded) for _ in (e.windows or (e,))]
                # the probe's inputs go along (``forward_or_keep``): where every story of the batch fails, it tells
                # a broken model from bad stories, as the serial path's ``label_or_keep`` does (two bad stories the
                # length sort put in one batch stopped the run on a GPU, and were kept on a CPU)
                known = probe_of(next(s for i, s in enumerate(payload) if i not in unread).roles)
                probe = None if known is None else known[2]
                results.put(("encoded", bid, (*_collate_np(_window_rows(encoded), tokenizer.pad_token_id), rows_of,
                                              probe)))
            else:
                everyone, encoded, unread = held.pop(bid)
                stories = [s for i, s in enumerate(everyone) if i not in unread]  # those ``encoded`` holds
                probs, row_errors = payload  # forward_or_keep's, one row per window (a story's windows in order)
                rows = _window_rows(encoded)
                # a story fails with the first of its windows that failed
                owner = [i for i, e in enumerate(encoded) for _ in (e.windows or (e,))]
                errors: dict[int, str] = {}
                for r in sorted(row_errors):
                    errors.setdefault(owner[r], row_errors[r])
                ok = [i for i in range(len(encoded)) if i not in errors]
                kept_p = [probs[r, : len(rows[r].input_ids)] for r in range(len(rows)) if owner[r] not in errors]
                merged_e, merged_p = _merge_windows([encoded[i] for i in ok], kept_p)
                items = [(stories[i], e, p) for i, e, p in zip(ok, merged_e, merged_p)]
                probe = decode_probe(items[0][0].roles, probs.shape[-1], probs.dtype) if items else None
                decoded = iter(label_or_keep(lambda its: decoder.decode_many(*map(list, zip(*its))), items,
                                             itemgetter(0), probe) if items else [])
                labels = iter([failed(s, errors[i]) if i in errors else next(decoded) for i, s in enumerate(stories)])
                results.put(("labels", bid, [failed(s, unread[i]) if i in unread else next(labels)
                                             for i, s in enumerate(everyone)]))
        except Exception as e:  # noqa: BLE001 - reported to the model process, which raises it
            results.put(("error", bid, _portable(e)))


__all__ = ["DEPTH", "HostPool", "HostWorkerError", "encode_or_keep", "exit_with_parent", "forward_or_keep"]
