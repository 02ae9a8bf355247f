"""Examples beside the product: a local corpus and the digest demo.

``local_corpus.py`` builds a real multi-domain corpus from text every Python
installation has (the main job and the tests train on it); ``digest_demo.py``
(``zephon-demo``, ``bash scripts/main.sh --demo``) streams it on several dp sizes and
compares every step's digest.
"""
