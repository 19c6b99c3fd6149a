from distvlog.cli import command

raise SystemExit(command())
