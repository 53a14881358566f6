from hpq.console import main

main()
