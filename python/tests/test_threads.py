"""The GIL is released during a merge: a thread keeps running while a long
merge runs on another."""
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


def longest_pause(start, end, ticks):
    inside = [start] + [t for t in ticks if start <= t <= end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


def test_a_thread_keeps_running_during_a_long_merge():
    p, d = compact_pair(prompt=32 * 1024, positions=64 * 1024)
    for merge_input in [(p, d), (p.decode(), d.decode())]:
        start, end, ticks = ticks_during(lambda: pd_stitch.merge_routed_experts_for_pd(*merge_input))
        took = end - start
        assert took > 0.02, "the merge is too quick to show anything"
        # With the GIL held for the whole merge the thread could not run at
        # all in between: its longest pause would be the merge itself.
        assert longest_pause(start, end, ticks) < 0.5 * took, (took, longest_pause(start, end, ticks))
