from kernforge.cli import main

main()
