from distvlog.cli import main; raise SystemExit(main())
