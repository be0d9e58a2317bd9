"""The collector paused while a flush builds its objects (pipeline/core/collector.py)."""

import gc

from pipeline.core.collector import paused, thaw


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


def test_what_a_pause_built_is_frozen_until_thawed() -> None:
    """The young collection after a pause would walk every object the block built."""
    thaw()
    with paused():
        built = [[i] for i in range(1000)]
    assert gc.get_freeze_count() >= len(built)
    thaw()
    assert gc.get_freeze_count() == 0
