import sys
print("cli: not written yet")
