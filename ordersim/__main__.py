from ordersim.cli import main

raise SystemExit(main())
