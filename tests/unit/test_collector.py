"""The collector paused while a flush builds its objects (pipeline/core/collector.py)."""

import gc

from pipeline.core.collector import paused


def test_the_collector_is_paused_for_the_outermost_block_only_and_left_as_found() -> None:
    assert gc.isenabled()
    with paused():
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
