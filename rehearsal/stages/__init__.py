"""The rehearsal's stages, each a function from a typed input to a typed output (hpq.rehearsal.run runs them in order).

A stage that creates something pushes its undo on the run's one :class:`hpq.rehearsal.teardown.TeardownStack`
right after creating it; a stage that fails raises :class:`base.Failure` naming stage, node and step, with what it
found before failing in ``Failure.found`` (for the summary).
"""
