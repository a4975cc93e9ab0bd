"""The classifier: bytes-in-flight traces in, a Verdict (ccscope.verdict) out.

    from ccscope.classifier import classify
    verdict = classify([trace_a, trace_b])   # the profiles of one measurement
    verdict.display, verdict.confidence, verdict.explanation, verdict.to_json()

Stages (features.py): smoothing at 1/RTT, slow-start removal, segmentation at back-offs,
penalised polynomial fits, shape features; detectors.py: BBRv1 and BBRv2/v3 timing; forest.py:
the random forest that names the class; gnb.py: Gaussian Naive Bayes (shape likelihoods behind
the Unknown rules); model.py: the shipped artifact and the Unknown rules; train.py: `ccscope train`
and `ccscope eval`; dataset.py: lab reference traces.
"""

from ccscope.classifier.core import classify, summarise
from ccscope.classifier.model import CLASSIFIER_VERSION, Model

__all__ = ["CLASSIFIER_VERSION", "Model", "classify", "summarise"]
