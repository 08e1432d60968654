"""The value formats of docs/protocol.md section 18, C against numpy, bit for bit.

libdcps's codec (proto/quant.c, through dcps._dcps.quantize and dequantize) and
the numpy reference of the second client (dcps_proto.encode and decode, written
from the spec) must make the same bytes and the same decoded values on inputs
chosen where rounding is decided: every float16 midpoint and its neighbours,
bfloat16 midpoints, subnormals, values beyond the format's range, int8 ties
and block edges, twobit's threshold itself. float16 and bfloat16 are also held
to torch's own conversions (half(), bfloat16()). The decoder refuses what no
encoder makes, with the shard's codes.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

try:
    import numpy as np
    import dcps
    from dcps import _dcps
    import dcps_proto as P
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

F32 = np.float32
DTYPE = P.FORMATS


def cases(seed):
    """Float32 arrays where the formats' rounding is decided."""
    r = np.random.default_rng(seed)
    h = np.arange(0x7bff, dtype=np.uint16)  # finite positive float16 codes
    a, b = h.view(np.float16).astype(np.float64), (h + 1).view(np.float16).astype(np.float64)
    mid = ((a + b) / 2).astype(F32)  # exact in float32
    f16 = np.concatenate([mid, np.nextafter(mid, F32(0)), np.nextafter(mid, F32(np.inf)), -mid])
    u = np.arange(0, 0x7f7f, 7, dtype=np.uint32) << 16
    bf = np.concatenate([(u | 0x8000).view(F32), (u | 0x7fff).view(F32), (u | 0x8001).view(F32),
                         ((u + 0x10000) | 0x8000).view(F32)])
    wide = (r.standard_normal(5000) * 10.0 ** r.integers(-44, 38, 5000)).astype(F32)
    big = np.array([65504, 65519.99, 65520, 1e9, -3.4e38, 3.4028235e38, 1e-45, -1e-45, 0, -0.0],
                   F32)
    return {"f16 midpoints": f16, "bf16 midpoints": bf, "wide": wide, "edges": big,
            "normal": r.standard_normal(4099).astype(F32),
            "ties": (np.arange(-300, 300) + F32(0.5)).astype(F32),
            "empty": np.zeros(0, F32)}


class AgainstNumpy(unittest.TestCase):
    def same(self, x, fmt, block=0, tau=0.0):
        enc, dec = _dcps.quantize(x, DTYPE[fmt], block, tau)
        ref, rdec = P.encode(x, fmt, block, tau)
        self.assertEqual(enc, ref, f"{fmt} block {block}: bytes")
        self.assertEqual(dec, rdec.tobytes(), f"{fmt} block {block}: decoded by the encoder")
        self.assertEqual(len(enc), P.frame_bytes(DTYPE[fmt], x.size, block))
        back = _dcps.dequantize(ref, DTYPE[fmt], x.size, block)
        self.assertEqual(back, P.decode(ref, DTYPE[fmt], x.size, block).tobytes())
        self.assertEqual(back, rdec.tobytes(), f"{fmt}: decoded = what the encoder said")
        return np.frombuffer(dec, F32)

    def test_float16_and_bfloat16(self):
        for name, x in cases(1).items():
            with self.subTest(name):
                d16 = self.same(x, "fp16")
                self.assertTrue(np.all(np.isfinite(d16)))  # clamped, never Inf
                self.same(x, "bf16")

    def test_int8_scales_ties_and_blocks(self):
        for name, x in cases(2).items():
            x = x[np.isfinite(x)]
            for block in (0, 1, 3, 256, 4096):
                with self.subTest(name, block=block):
                    d = self.same(x, "int8", block)
                    if x.size and block == 256:  # within half a step of its block's scale
                        s = np.repeat([np.max(np.abs(x[a:a + 256])) / F32(127)
                                       for a in range(0, x.size, 256)], 256)[:x.size]
                        self.assertTrue(np.all(np.abs(d - x) <= s * 0.5000001 + 1e-45))
        # scale = 127 / 127 = 1: x.5 ties go to the even code.
        enc, _ = _dcps.quantize(np.array([127, 2.5, 3.5, -0.5], F32), DTYPE["int8"])
        self.assertEqual(list(np.frombuffer(enc[4:], np.int8)), [127, 2, 4, 0])

    def test_twobit(self):
        for name, x in cases(3).items():
            for tau in (1e-3, 0.5, 3.0):
                with self.subTest(name, tau=tau):
                    d = self.same(x, "twobit", 0, tau)
                    self.assertTrue(set(np.unique(d)) <= {F32(0), F32(tau), F32(-tau)})
        d = self.same(np.array([0.5, -0.5, np.nextafter(F32(0.5), F32(0)), 7], F32), "twobit",
                      tau=0.5)
        self.assertEqual(list(d), [0.5, -0.5, 0, 0.5])

    def test_refusals(self):
        scale = np.array([1.0], "<f4").tobytes()
        for data, dtype, count, text in [
                (scale + b"\x80", 6, 1, "int8 code -128 at offset 0"),
                (np.array([-1.0], "<f4").tobytes() + b"\x01", 6, 1, "is negative"),
                (np.array([np.inf], "<f4").tobytes() + b"\x01", 6, 1, "not finite"),
                (scale + b"\x03", 7, 1, "twobit code 3 at offset 0"),
                (scale + b"\x10", 7, 2, "unused bits"),
                (b"\x00\x7c", 4, 1, "fp16 value inf"), (b"\xc0\x7f", 5, 1, "bf16 value nan")]:
            with self.assertRaises(dcps.Error) as e:
                _dcps.dequantize(data, dtype, count)
            self.assertIn(text, str(e.exception))


class AgainstTorch(unittest.TestCase):
    def test_half_and_bfloat16_conversions(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        for name, x in cases(4).items():
            x = x[np.abs(x) <= 65504]  # torch's half() makes Inf beyond; dcps clamps
            with self.subTest(name):
                enc, _ = _dcps.quantize(x, DTYPE["fp16"])
                t = torch.from_numpy(x.copy()).half().view(torch.int16).numpy().tobytes()
                self.assertEqual(enc, t)
                enc, _ = _dcps.quantize(x, DTYPE["bf16"])
                t = torch.from_numpy(x.copy()).bfloat16().view(torch.int16).numpy().tobytes()
                self.assertEqual(enc, t)


if __name__ == "__main__":
    harness.main(need_torch=False, need_data=False)
