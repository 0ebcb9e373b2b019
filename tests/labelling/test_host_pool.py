"""The GPU layout's message handling (``harness.labelling.host_pool``): reader threads and a worker's order of work.

The whole pool (worker processes, the model in this process) is tested in ``test_encoder.py``
(``test_host_workers_stream_windows_and_a_failure_closes_them`` and the next test)."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from harness.labelling.base import RoleSpec, StoryInput
from harness.labelling.host_pool import (HostWorkerError, _read_inbox, _read_results, _tokenising_first, encode_or_keep,
                                         forward_or_keep)


def _kinds(messages):
    return [(kind, bid) for kind, bid, _ in messages]


def test_a_worker_tokenises_the_batches_waiting_before_it_decodes_in_order():
    inbox = queue.Queue()
    for msg in [("decode", 0, None), ("decode", 1, None), ("encode", 2, None), ("decode", 3, None),
                ("encode", 4, None), None]:
        inbox.put(msg)
    assert _kinds(_tokenising_first(inbox)) == [("encode", 2), ("encode", 4), ("decode", 0), ("decode", 1),
                                                ("decode", 3)]


def test_a_batch_given_while_the_worker_decodes_goes_before_the_decodings_that_wait():
    inbox = queue.Queue()
    inbox.put(("decode", 0, None))
    inbox.put(("decode", 1, None))
    work = _tokenising_first(inbox)
    assert next(work)[:2] == ("decode", 0)
    inbox.put(("encode", 2, None))  # given while batch 0 was decoded
    assert next(work)[:2] == ("encode", 2)
    assert next(work)[:2] == ("decode", 1)
    inbox.put(("decode", 2, None))
    assert next(work)[:2] == ("decode", 2)  # nothing waiting: the next message, waited for
    inbox.put(None)
    assert list(work) == []


def test_a_stop_ends_the_work_after_the_messages_before_it():
    inbox = queue.Queue()
    work = _tokenising_first(inbox)
    inbox.put(("decode", 0, None))
    assert next(work)[:2] == ("decode", 0)
    for msg in [("decode", 1, None), ("encode", 2, None), None]:
        inbox.put(msg)
    assert _kinds(work) == [("encode", 2), ("decode", 1)]
    inbox.put(None)
    assert list(_tokenising_first(inbox)) == []  # a stop alone: no work


class _Pipe:
    """An inbox or results queue of the other process: its messages, then ``end`` (a message or an error)."""

    def __init__(self, messages, end):
        self.messages, self.end = list(messages), end

    def get(self):
        if self.messages:
            return self.messages.pop(0)
        if isinstance(self.end, BaseException):
            raise self.end
        return self.end


@pytest.mark.parametrize("end", [None, EOFError(), OSError("handle is closed")])
def test_a_workers_reader_passes_each_message_on_and_then_the_stop(end):
    local = queue.Queue()
    _read_inbox(_Pipe([("encode", 0, "a"), ("decode", 0, "b")], end), local)
    assert [local.get_nowait() for _ in range(3)] == [("encode", 0, "a"), ("decode", 0, "b"), None]
    assert local.empty()


def test_the_model_process_reader_stops_at_the_pools_end_of_the_pipe_and_reports_a_message_it_cannot_read():
    arrived, stopping = queue.Queue(), threading.Event()
    stopping.set()  # the pool closed the pipe (``HostPool.close``): its end is no error
    _read_results(_Pipe([("encoded", 0, "x"), ("labels", 0, "y")], EOFError()), arrived, stopping)
    assert [arrived.get_nowait() for _ in range(2)] == [("encoded", 0, "x"), ("labels", 0, "y")]
    assert arrived.empty()
    _read_results(_Pipe([("ready", -1, None)], EOFError("ran out of input")), arrived, threading.Event())
    assert arrived.get_nowait() == ("ready", -1, None)
    kind, _, error = arrived.get_nowait()
    assert kind == "error" and isinstance(error, HostWorkerError)
    assert str(error) == "encoder labeller: a host worker's message could not be read: EOFError: ran out of input"


def test_a_forward_pass_failing_for_every_story_reaches_the_caller_from_the_forward_thread(tiny_encoder, gold):
    """The model runs in a thread of the model process: an error of the device (every story of a batch fails alone
    too, ``forward_or_keep``) is raised to the caller with its own type, as when it ran in the caller's thread, and
    the pool closes (the encoder labeller starts a new one); a closed pool refuses a call (it yielded nothing)."""
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    stories = [g.story for g in gold[:4]]
    pool = HostPool(1, str(lab.path / "encoder"), lab.decoder)

    def broken(ids, am, tt):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    try:
        assert [b[0].story_id for b in pool.label([stories[:2], stories[2:]], lab._forward)] == [
            stories[0].story_id, stories[2].story_id]
        with pytest.warns(RuntimeWarning, match="labelled one at a time"), \
                pytest.raises(RuntimeError, match="illegal memory access") as err:
            list(pool.label([stories[:2], stories[2:]], broken))
        # its own type: a HostWorkerError (a RuntimeError too) reads as a dead worker to the encoder labeller
        assert type(err.value) is RuntimeError
        assert not pool.busy and pool.pids == [] and not pool._reader.is_alive()
        with pytest.raises(HostWorkerError, match="^encoder labeller: this host pool is closed; start a new one$"):
            list(pool.label([stories[:2]], lab._forward))
    finally:
        pool.close(wait=False)


def _die_mid_message(results, started) -> None:
    """A host worker terminated while it wrote: it holds the queue's write lock and has sent a message's first bytes."""
    import os
    import struct
    import time

    results._wlock.acquire()  # as a queue's feeder thread does before each message
    os.write(results._writer.fileno(), struct.pack("!i", 1000) + b"x" * 10)  # 10 of the 1,000 bytes it announces
    started.set()
    time.sleep(120)


def test_close_ends_the_reader_a_worker_terminated_mid_message_left_waiting_and_leaves_no_thread(tiny_encoder):
    """The worker holds the write lock for good, so a "stop" put on the queue never reaches the pipe and the reader
    waits for the message's rest: close ends the pipe instead, and the reader with it (it lived on, a flaky failure
    of test_host_workers_stream_windows_and_a_failure_closes_them). The "stop" close still put started this
    process's feeder thread of the queue, which waited for ever on that lock (a thread left per such close); close
    puts nothing on the queue now."""
    import multiprocessing as mp

    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    before = set(threading.enumerate())
    pool = HostPool(1, str(lab.path / "encoder"), lab.decoder)
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    writer = ctx.Process(target=_die_mid_message, args=(pool._results, started), daemon=True)
    writer.start()
    try:
        assert started.wait(60)
        writer.terminate()
        writer.join(10)
        assert pool._reader.is_alive()  # waiting for the rest of the message
        pool.close(wait=False)
        assert not pool._reader.is_alive() and pool.pids == []
        assert [t.name for t in threading.enumerate() if t not in before] == []
    finally:
        writer.kill()
        pool.close(wait=False)


ROLES = (RoleSpec("subject", "student"),)


def _arrays(rows: int, value: int = 1) -> tuple:
    ids = np.full((rows, 8), value, dtype=np.int64)
    return ids, np.ones_like(ids), np.zeros_like(ids)


def test_a_batch_of_one_story_that_fails_where_the_probe_fails_too_is_raised():
    """Beside a GPU at --batch-size 1, a broken device or tokenizer failed each story alone, and each was kept as
    "labeller error" (exit 0, never retried): ``forward_or_keep`` and ``encode_or_keep`` kept a batch of one story
    without the probe ``label_or_keep`` tries. They try a probe story now (its model inputs, from the worker) and
    raise the story's error where it fails too; where it passes, the story is at fault and kept."""
    story = StoryInput("s0", "Ana went to school. She liked it.", ROLES)
    probe = _arrays(1, value=2)

    def broken(ids, am, tt):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def refuses_the_story(ids, am, tt):  # the probe's ids are 2s, the story's 1s
        if (ids == 1).any():
            raise ValueError("no story here")
        return np.zeros((*ids.shape, 4), dtype=np.float32)

    with pytest.raises(RuntimeError, match="illegal memory access"):
        forward_or_keep(broken, *_arrays(1), None, probe)
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="illegal memory access"):
        forward_or_keep(broken, *_arrays(3), [0, 0, 0], probe)  # one story's three windows
    assert forward_or_keep(refuses_the_story, *_arrays(1), None, probe) == (
        None, {0: "labeller error: ValueError: no story here"})
    with pytest.warns(RuntimeWarning):
        assert forward_or_keep(refuses_the_story, *_arrays(2), [0, 0], probe) == (
            None, {0: "labeller error: ValueError: no story here", 1: "labeller error: ValueError: no story here"})
    # two stories that both fail while the probe passes: kept, as the serial path keeps them (they stopped the run)
    with pytest.warns(RuntimeWarning):
        assert forward_or_keep(refuses_the_story, *_arrays(2), None, probe) == (
            None, {0: "labeller error: ValueError: no story here", 1: "labeller error: ValueError: no story here"})
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="illegal memory access"):
        forward_or_keep(broken, *_arrays(2), None, probe)
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="no story here"):
        forward_or_keep(refuses_the_story, *_arrays(2))  # no probe to tell them apart
    # no probe: kept, as before
    assert forward_or_keep(broken, *_arrays(1))[1] == {
        0: "labeller error: RuntimeError: CUDA error: an illegal memory access was encountered"}

    def broken_tokenizer(stories):
        raise RuntimeError("Already borrowed")

    def refuses(stories):
        if any(s.story_id == "s0" for s in stories):
            raise ValueError("no story here")
        return [s.story_id for s in stories]

    with pytest.raises(RuntimeError, match="Already borrowed"):
        encode_or_keep(broken_tokenizer, [story])
    assert encode_or_keep(refuses, [story]) == ([], {0: "labeller error: ValueError: no story here"})


def test_a_batch_the_model_fails_on_keeps_each_story_that_passes_alone_in_its_own_row():
    """A batch the model fails on (out of memory) is run again row by row, each without its padding: a row that
    passes keeps its own probabilities in its own row, and a story that fails alone is kept with its error wherever
    it stands in the batch, with a probe or without (some rows passed: the stories are at fault, not the device).
    Guards against raising the batch where its last story fails, which loses the stories that passed with it."""
    ids = np.array([[5, 6, 7, 8], [9, 1, 0, 0], [3, 4, 2, 0]])
    am, tt = (ids > 0).astype(np.int64), np.zeros_like(ids)
    seen = []

    def fails_on(first):
        def forward(ids, am, tt):
            if len(ids) > 1:
                raise RuntimeError("CUDA out of memory")
            seen.append(ids[0].tolist())
            if ids[0, 0] == first:
                raise ValueError("no story here")
            return np.repeat(ids[..., None], 2, axis=-1).astype(np.float32)  # a token's probabilities: its id

        return forward

    for bad in (1, 2):  # a story in the middle, the last story
        for probe in (None, _arrays(1, value=2)):
            seen.clear()
            with pytest.warns(RuntimeWarning):
                probs, errors = forward_or_keep(fails_on(ids[bad, 0]), ids, am, tt, None, probe)
            assert seen == [[5, 6, 7, 8], [9, 1], [3, 4, 2]]
            assert errors == {bad: "labeller error: ValueError: no story here"}
            want = np.where(am[..., None] == 1, np.repeat(ids[..., None], 2, axis=-1), 0).astype(np.float32)
            want[bad] = 0
            assert probs.shape == (3, 4, 2) and (probs == want).all()


class _Decoder:
    """A decoder that fails on a batch with a story named in ``bad`` ("probe": the probe story)."""

    def __init__(self, decoder, bad: set[str]) -> None:
        self._decoder, self.bad = decoder, bad

    def __getattr__(self, name):
        return getattr(self._decoder, name)

    def decode_many(self, stories, encoded, probs):
        if any(s.story_id in self.bad for s in stories):
            raise RuntimeError("the parser is broken")
        return self._decoder.decode_many(stories, encoded, probs)


def test_a_host_worker_tells_a_broken_model_or_decoder_from_a_bad_story_in_a_batch_of_one(tiny_encoder, gold):
    """A batch of one story (--batch-size 1) that the model or the decoder failed on was kept as "labeller error"
    however broken the device or the decoder (every story so, exit 0). The worker (``host_pool._serve``, run here in
    a thread) sends the probe story's model inputs with every batch, and decodes the probe where every story's
    decoding fails: a model or decoder that fails on the probe too is raised, stories alone at fault kept."""
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import _serve

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    story, other = gold[0].story, gold[1].story
    want = lab.label(story, batch_size=1)
    decoder = _Decoder(lab.decoder, set())
    inbox, results = queue.Queue(), queue.Queue()
    worker = threading.Thread(target=_serve, args=(str(lab.path / "encoder"), decoder, inbox, results), daemon=True)
    worker.start()

    def broken(ids, am, tt):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def label(bid, forward):
        inbox.put(("encode", bid, [story]))
        kind, _, payload = results.get(timeout=60)
        assert kind == "encoded" and payload[4] is not None
        assert payload[4][0].shape[1] < payload[0].shape[1]  # the probe is shorter than the story
        probe_len = payload[4][0].shape[1]

        def story_fails(ids, am, tt):  # fails on the story's length, passes on the probe's
            if forward is None and ids.shape[1] > probe_len:
                raise RuntimeError("no story here")
            return (forward or lab._forward)(ids, am, tt)

        try:
            probs = forward_or_keep(story_fails, *payload)
        except RuntimeError as e:
            return e
        inbox.put(("decode", bid, probs))
        kind, got_bid, payload = results.get(timeout=60)
        assert got_bid == bid
        return kind, payload

    try:
        assert results.get(timeout=60)[0] == "ready"
        assert label(0, lab._forward) == ("labels", [want])
        err = label(1, broken)
        assert isinstance(err, RuntimeError) and "illegal memory access" in str(err)
        kind, got = label(2, None)
        assert kind == "labels" and got[0].status == "labeller error: RuntimeError: no story here"
        decoder.bad.add(story.story_id)
        kind, got = label(3, lab._forward)
        assert kind == "labels" and got[0].status == "labeller error: RuntimeError: the parser is broken"
        decoder.bad.add("probe")
        kind, got = label(4, lab._forward)
        assert kind == "error" and "the parser is broken" in str(got)
        # two stories the decoder fails on, in one batch, while it labels the probe: both kept (the run stopped)
        decoder.bad = {story.story_id, other.story_id}
        inbox.put(("encode", 5, [story, other]))
        kind, _, payload = results.get(timeout=60)
        assert kind == "encoded" and payload[4] is not None
        inbox.put(("decode", 5, forward_or_keep(lab._forward, *payload)))
        kind, _, got = results.get(timeout=60)
        assert kind == "labels"
        assert [g.status for g in got] == ["labeller error: RuntimeError: the parser is broken"] * 2
        decoder.bad.add("probe")
        inbox.put(("encode", 6, [story, other]))
        kind, _, payload = results.get(timeout=60)
        inbox.put(("decode", 6, forward_or_keep(lab._forward, *payload)))
        kind, _, got = results.get(timeout=60)
        assert kind == "error" and "the parser is broken" in str(got)
    finally:
        inbox.put(None)
        worker.join(timeout=60)


def test_a_host_worker_keeps_the_story_whose_window_the_model_fails_on_and_labels_the_others(tiny_encoder, gold):
    """A batch with a story read in windows (a long story is several rows of the model's input) that the model
    fails on, run again row by row: the story one of whose windows fails alone is kept with that error, and the
    other story is labelled from its own rows, as alone. Guards against a row's index taken for its story's (they
    differ past a story's first window): it fails the wrong story, or labels the failed one "ok" from zeros."""
    from harness.labelling.encoder import EncoderLabeller, _encode_windows
    from harness.labelling.host_pool import _serve

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)

    def windows(story):
        return _encode_windows(lab.tokenizer, [story], lab.max_length)[0].windows

    short = gold[0].story
    long = next(s for k in range(2, 40) if windows(s := StoryInput("long", " ".join([short.text] * k), short.roles)))
    batch = [long, short]
    want = [lab.label(s, batch_size=1) for s in batch]
    inbox, results = queue.Queue(), queue.Queue()
    worker = threading.Thread(target=_serve, args=(str(lab.path / "encoder"), lab.decoder, inbox, results), daemon=True)
    worker.start()
    try:
        assert results.get(timeout=60)[0] == "ready"
        for bid, (bad, window) in enumerate([(0, 1), (1, 0)]):  # the long story's second window; the short story's
            inbox.put(("encode", bid, batch))
            kind, _, payload = results.get(timeout=60)
            ids, am, _, rows_of, _ = payload
            assert kind == "encoded" and rows_of[:2] == [0, 0] and rows_of[-1] == 1
            failing = [ids[r, :n].tolist() for r, n in enumerate(am.sum(1).tolist()) if rows_of[r] == bad][window]

            def fails(ids, am, tt):
                if len(ids) > 1:
                    raise RuntimeError("CUDA out of memory")
                if ids[0].tolist() == failing:
                    raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")
                return lab._forward(ids, am, tt)

            with pytest.warns(RuntimeWarning):
                inbox.put(("decode", bid, forward_or_keep(fails, *payload)))
            kind, got_bid, got = results.get(timeout=60)
            assert kind == "labels" and got_bid == bid
            assert got[bad].status == "labeller error: RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"
            assert got[1 - bad] == want[1 - bad]
    finally:
        inbox.put(None)
        worker.join(timeout=60)


def test_a_call_left_open_while_its_pool_closes_raises_rather_than_waits_for_ever(tiny_encoder, gold, drain_in_thread):
    """The encoder labeller closes a pool whose worker died although another call still streams from it, and
    ``close`` runs with an iterator open: resumed, that call waited for ever (close forgot the workers, so none was
    seen dead, and a receive has no time limit). It raises HostWorkerError now."""
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    stories = [g.story for g in gold[:4]]
    pool = HostPool(1, str(lab.path / "encoder"), lab.decoder)
    try:
        calls = pool.label([[s] for s in stories], lab._forward)
        assert next(calls)[0].story_id == stories[0].story_id
        pool.close()
        out = drain_in_thread(calls)
        assert isinstance(out.get("error"), HostWorkerError)
        assert str(out["error"]) == "encoder labeller: the host pool was closed during this call"
        assert not pool.busy
    finally:
        pool.close(wait=False)


@pytest.fixture(scope="module")
def host_pool(tiny_encoder):
    """A pool of one host worker and the labeller whose model runs its forward passes (tests that keep it healthy)."""
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    pool = HostPool(1, str(lab.path / "encoder"), lab.decoder)
    yield lab, pool
    pool.close(wait=False)


def test_an_input_error_comes_after_the_batches_handed_out_before_it_and_the_pool_carries_on(host_pool, gold):
    """An error reading the next batch (a bad row, a file that cannot be read on) was raised at once, losing the
    batches labelled or in flight (iter_label's whole finished window), and the pool closed; the serial path yields
    them first. They are yielded now, then the error is raised, and the pool takes the next call. An input that is
    not iterable left the pool busy for good (every later call refused)."""
    lab, pool = host_pool
    stories = [g.story for g in gold[:5]]
    pids = pool.pids

    def batches():
        yield from ([s] for s in stories)
        raise OSError("the input file could not be read past story 5")

    got = []
    with pytest.raises(OSError, match="past story 5"):
        for labels in pool.label(batches(), lab._forward):
            got.append(labels[0].story_id)
    assert got == [s.story_id for s in stories]
    assert not pool.busy and not pool.closed and pool.pids == pids
    with pytest.raises(TypeError):
        list(pool.label(42, lab._forward))
    assert not pool.busy
    assert [b[0].story_id for b in pool.label([stories[:2]], lab._forward)] == [stories[0].story_id]


def test_a_call_whose_every_label_was_taken_ends_without_the_one_more_ask(host_pool, gold):
    """A caller that takes every label and asks for nothing more (zip, islice, next on a stream of one) left the call
    suspended at its last batch: the pool stayed busy while the spent iterator lived (another call labelled in the
    caller's process), and was torn down when it was dropped (workers terminated, started again by the next call).
    The call ends before it yields its last batch now."""
    lab, pool = host_pool
    stories = [g.story for g in gold[:4]]
    pids = pool.pids
    calls = pool.label([stories[:2], stories[2:]], lab._forward)
    assert [next(calls)[0].story_id for _ in range(2)] == [stories[0].story_id, stories[2].story_id]
    assert not pool.busy
    calls.close()
    assert not pool.closed and pool.pids == pids
    assert [b[0].story_id for b in pool.label([stories[:1]], lab._forward)] == [stories[0].story_id]


def test_a_worker_starting_restores_the_ctrl_c_handler_it_inherited():
    """``starting()`` ignores Ctrl-C while a worker loads, then put back Python's default handler whatever the
    worker had inherited: a worker of a process that ignores SIGINT (a shell's background job) died of the Ctrl-C
    its parent ignored, and failed the run. It restores what it found."""
    import signal

    from harness.labelling.host_pool import starting

    before = signal.getsignal(signal.SIGINT)
    try:
        for inherited in (signal.SIG_IGN, signal.default_int_handler):
            signal.signal(signal.SIGINT, inherited)
            with starting():
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) is inherited
    finally:
        signal.signal(signal.SIGINT, before)


class _Unpicklable(Exception):
    """An error whose pickle cannot be read back: it needs two arguments and gives its parent one."""

    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


def test_a_worker_error_crosses_with_its_traceback_or_as_host_worker_error_carrying_its_text():
    from harness.labelling.host_pool import _portable

    def fail(exc):
        try:
            raise exc
        except Exception as e:
            return e

    kept = _portable(fail(ValueError("a bad window")))
    assert type(kept) is ValueError and str(kept) == "a bad window"
    assert kept.__notes__[0].startswith("in a host worker process:\nTraceback") and "a bad window" in kept.__notes__[0]
    swapped = _portable(fail(_Unpicklable("a bad window", "story 7")))
    assert type(swapped) is HostWorkerError
    text = str(swapped)
    assert text.startswith("_Unpicklable: a bad window at story 7\nin a host worker process:\nTraceback")
    assert text.rstrip().endswith("_Unpicklable: a bad window at story 7")
    import pickle

    assert str(pickle.loads(pickle.dumps(swapped))) == text  # it crosses itself
