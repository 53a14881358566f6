from hpq.cli.main import main

main()
