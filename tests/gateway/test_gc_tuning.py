"""The gateway tunes the garbage collector only when it owns its process (the CLI's server)."""

import gc

from gateway.app import GC_YOUNG_THRESHOLD, quiet_collector


def test_quiet_collector_freezes_start_up_state_and_raises_the_young_threshold():
    threshold = gc.get_threshold()
    try:
        survivor = {"start-up": ["state"]}
        quiet_collector()
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == threshold[1:]
        assert gc.get_freeze_count() > 0
        # frozen: out of the collector's view. By identity: `in` would compare the dict with every live object, and
        # some objects' __eq__ raise on a dict (httpx.Headers: "Header value must be str or bytes").
        assert not any(tracked is survivor for tracked in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_an_app_built_inside_another_program_leaves_the_collector_alone(gateway):
    # `gateway` is a running app built by the test process (owns_process False): its start-up changed nothing
    assert gc.get_threshold()[0] != GC_YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0
