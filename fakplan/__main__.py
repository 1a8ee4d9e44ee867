from fakplan.cli import main

main()
