"""The GIL is released during a merge: a thread keeps running while a long
merge runs on another."""
import re
import threading
import time

import pd_stitch
from pure_merge import compact_pair


def ticks_during(call):
    """Runs `call` while a thread records the time of each of its loop
    iterations; returns the call's window and the ticks."""
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.02)  # the thread is spinning
    start = time.perf_counter()
    call()
    end = time.perf_counter()
    stop.set()
    thread.join()
    return start, end, ticks


def ticks_inside(start, end, ticks):
    """The ticks in the middle 80% of the window `[start, end)`: the edges
    are where the call converts its arguments and its result, with the GIL
    held."""
    margin = 0.1 * (end - start)
    return [t for t in ticks if start + margin <= t <= end - margin]


def test_a_thread_keeps_running_during_a_long_merge():
    p, d = compact_pair(prompt=32 * 1024, positions=64 * 1024)
    # bytes, str, and a bytearray merged where it is.
    for merge_input in [(p, d), (p.decode(), d.decode()), (p, bytearray(d))]:
        start, end, ticks = ticks_during(lambda: pd_stitch.merge_routed_experts_for_pd(*merge_input))
        took = end - start
        assert took > 0.02, "the merge is too quick to show anything"
        # With the GIL held for the whole merge the thread could not run at
        # all in between: no tick inside. (Not a bound on its pauses: on a
        # loaded machine the scheduler alone makes pauses of a large part of
        # the merge, which is not what this test is about.)
        inside = ticks_inside(start, end, ticks)
        assert len(inside) > 0, (took, len(ticks))


def test_the_check_fails_when_the_gil_is_held():
    # The same measurement of a call that holds the GIL throughout: the
    # regular expression engine never gives it up, and this pattern
    # backtracks for a while before it fails.
    pattern = re.compile(r"(a+)+$")
    start, end, ticks = ticks_during(lambda: pattern.match("a" * 22 + "b"))
    assert end - start > 0.02, "too quick to show anything"
    assert ticks_inside(start, end, ticks) == [], (end - start, len(ticks))
