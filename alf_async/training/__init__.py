"""One run life cycle (``trainer.py``, read it first) driving one of three loops
(``on_policy.py``, ``off_policy.py``, ``hogwild_loop.py``) through the seam in
``loop.py``; ``parts.py`` picks the learner and the loop."""
