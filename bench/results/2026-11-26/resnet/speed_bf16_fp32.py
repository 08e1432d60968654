import torch, time, torchvision
from torch import nn
torch.set_num_threads(1)
m = torchvision.models.resnet18(num_classes=10)
m.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
import sys
if sys.argv[1] == "nomp": m.maxpool = nn.Identity()
x = torch.rand(32, 1, 28, 28); y = torch.randint(0, 10, (32,))
for bf in (False, True):
    ts = []
    for i in range(3):
        t = time.time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf):
            loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        ts.append(time.time() - t)
    print(sys.argv[1], "bf16" if bf else "fp32", ["%.2f" % t for t in ts], loss.dtype, flush=True)
