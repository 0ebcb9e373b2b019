"""The GPU layout's message handling (``harness.labelling.host_pool``): reader threads and a worker's order of work.

The whole pool (worker processes, the model in this process) is tested in ``test_encoder.py``
(``test_host_workers_stream_windows_and_a_failure_closes_them`` and the next test)."""

from __future__ import annotations

import queue

import pytest

from harness.labelling.host_pool import HostWorkerError, _read_inbox, _read_results, _tokenising_first


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


def test_the_model_process_reader_stops_at_the_pools_stop_and_reports_a_message_it_cannot_read():
    arrived = queue.Queue()
    _read_results(_Pipe([("encoded", 0, "x"), ("labels", 0, "y"), ("stop", -1, None), ("labels", 1, "z")], None),
                  arrived)
    assert [arrived.get_nowait() for _ in range(2)] == [("encoded", 0, "x"), ("labels", 0, "y")]
    assert arrived.empty()
    _read_results(_Pipe([("ready", -1, None)], EOFError("ran out of input")), arrived)
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
                pytest.raises(RuntimeError, match="illegal memory access"):
            list(pool.label([stories[:2], stories[2:]], broken))
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


def test_close_ends_the_reader_a_worker_terminated_mid_message_left_waiting(tiny_encoder):
    """The worker holds the write lock for good, so the pool's "stop" never reaches the pipe and the reader waits for
    the message's rest: close ends the pipe instead, and the reader with it (it lived on, a flaky failure of
    test_host_workers_stream_windows_and_a_failure_closes_them)."""
    import multiprocessing as mp

    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
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
    finally:
        writer.kill()
        pool.close(wait=False)
