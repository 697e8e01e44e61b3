"""Names, places and organizations (PERSON / LOCATION / ORGANIZATION) without spaCy or torch.

A linear-chain model over hashed token features (averaged structured perceptron, BIO tags, Viterbi decoding in
numpy), trained by `python -m guardrails.ner.train` on the corpora in data/ plus template sentences built from the
lists in lists/. The shipped weights are model/ner.npz; recognizer.py plugs them into Presidio. Street addresses are
matched by patterns (address.py) as LOCATION.
"""
