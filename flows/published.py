"""The published figures our runs are shown beside, defined once.

Flows print them in their summaries and benchmarks in their tables; both import them from here.
"""

from __future__ import annotations

# Extreme Classification Repository, LEML row: P@1, P@3, P@5 in % (Yu, Jain, Kar and Dhillon,
# ICML 2014, on the repository's train / test split with every label observed).
LEML_XC = {
    "bibtex": {"precision@1": 62.54, "precision@3": 38.41, "precision@5": 28.21},
    "delicious": {"precision@1": 65.67, "precision@3": 60.55, "precision@5": 56.08},
}

# Chen, Ji, Tan and Niu (IJCNLP 2005), Tables 4 and 5: accuracy in % on ACE in three domains,
# entropy-based feature ranking and Hasegawa et al. (2004) at the true k.
CHEN_ACE = {"entropy": (41.3, 50.6, 42.4), "hasegawa-true-k": (32.4, 43.7, 26.5)}

# Stoyanov and Cardie (EMNLP 2006) on MPQA: B³ F1 and pairwise F1 in %, over the source mentions.
STOYANOV_MPQA = {"ripper": (81.8, 60.6), "strip-partial": (83.2, 67.1)}
