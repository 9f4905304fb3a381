"""KEP-SVGP attention (Chen et al., ICML 2024).

Work in progress (issue 6): the attention layer and its losses are implemented and tested;
``KEPSVGPClassifier`` is not public yet.
"""
