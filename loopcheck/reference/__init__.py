"""The reference training loop: every training-loop detail right, resumable bit for bit.

`python -m loopcheck.reference --epochs N --seed S --ckpt-dir DIR` runs it; in Python,
`from loopcheck.reference.train import Config, train`. `loopcheck init` writes `train.py` out
as a standalone script (it imports only torch, numpy and the standard library). Importing this
package itself does not import torch.
"""
