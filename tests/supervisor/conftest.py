"""The supervisor's tests run it strict, as every test does (tests/conftest.py's autouse
`strict_supervisor`): a worker state change its table does not allow raises there
(MPWATCH_STRICT_STATES: settings, supervisor.workers.states), and a run whose events hold an
`internal` alert, or whose supervisor.log holds a bug's traceback (supervisor.errors), fails the
test that made it, whichever thread hit the bug."""
