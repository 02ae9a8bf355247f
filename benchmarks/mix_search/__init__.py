"""Mix-search benchmarks: Zephon's search against random, grid and RegMix on synthetic truths and RegMix's runs."""
