"""A submission that ends the process while it is loaded."""
import sys

sys.exit(3)
