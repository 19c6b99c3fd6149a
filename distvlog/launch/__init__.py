"""Launching a job: `distvlog launch` starts the ranks (`command`), each rank runs the script under `run`
(a failing rank ends the job; a script that ended leaves its end record) and `report` says afterwards, from
the ranks' logs, what happened.

It sits above `distvlog.distributed` (the MPI runtime the ranks use) and `distvlog.tools` (whose reader and merge
the report uses); neither of them imports it. Nothing is imported here: each rank starts `run` and should
not pay for the tools.
"""
