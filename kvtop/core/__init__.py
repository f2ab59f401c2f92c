"""Leaf modules every layer may import: units and number bounds, standard library only.

``bounds`` (the one rule for a size, count or duration read from outside) and ``units``
(``parse_bytes``). Nothing here imports another kvtop module (``tests/unit/test_import_contract.py``).
"""
