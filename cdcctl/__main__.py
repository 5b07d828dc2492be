"""python -m cdcctl"""

from cdcctl.main import main

main()
