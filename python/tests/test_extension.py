#!/usr/bin/env python3
"""dcps._dcps, the C extension: errors with codes and sentences, refused arrays
(nothing sent), the GIL released while a call waits, one thread per worker,
and the version. Real shards on 127.0.0.1; arrays from the array module, so
that this suite needs no numpy or torch."""
import array
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import dcps  # noqa: E402

N = 784 * 64 + 64 + 64 * 10 + 10  # the harness's default 784,64,10 MLP


def floats(n, value=0.0, typecode="f"):
    return array.array(typecode, [value]) * n


class Errors(unittest.TestCase):
    def test_version_matches_the_library(self):
        with open(os.path.join(harness.SRC, "configure.ac")) as f:
            ac = f.read()
        self.assertIn(f"AC_INIT([dcps], [{dcps.__version__}]", ac)

    def test_bad_job_file_is_a_config_error_naming_the_key(self):
        job = harness.Job(harness.job_text(optimizer={"lr": "70"}), shards=0)
        try:
            with self.assertRaises(dcps.ConfigError) as cm:
                dcps.Step(job.path, 0, N)
            self.assertEqual(cm.exception.code, dcps._dcps.E_CONFIG)
            self.assertEqual(cm.exception.name, "CONFIG")
            self.assertIn("[optimizer] lr", str(cm.exception))
        finally:
            job.close()
        job = harness.Job(harness.job_text(), shards=0)
        try:
            with self.assertRaises(dcps.ConfigError) as cm:
                dcps.Step(job.path, 0, N, ["optimizer.lr=0.1", "nosuch.key=1"])
            self.assertIn("nosuch", str(cm.exception))
        finally:
            job.close()

    def test_missing_file_and_bad_arguments(self):
        with self.assertRaises(dcps.ConfigError) as cm:
            dcps.Step("/nonexistent/job.ini", 0, N)
        self.assertIn("/nonexistent/job.ini", str(cm.exception))
        with self.assertRaises(ValueError):
            dcps.Step("/nonexistent/job.ini", -1, N)
        with self.assertRaises(ValueError):
            dcps.Step("/nonexistent/job.ini", 0, 0)
        with self.assertRaises(TypeError):
            dcps.Step("/nonexistent/job.ini", 0, N, [1])

    def test_size_differing_from_the_job_is_refused_before_connecting(self):
        job = harness.Job(harness.job_text(), shards=2)
        try:
            with self.assertRaises(dcps.SizeError) as cm:
                dcps.Step(job.path, 0, N + 1, [job.shards])
            self.assertEqual(cm.exception.code, dcps._dcps.E_SIZE)
            self.assertIn(f"{N + 1} parameters", str(cm.exception))
            self.assertIn(f"{N}", str(cm.exception))
        finally:
            job.close()

    def test_silent_shards_are_a_connection_error(self):
        text = harness.job_text(worker={"timeout_ms": 100, "retries": 1})
        job = harness.Job(text, shards=0)
        try:
            t0 = time.monotonic()
            with self.assertRaises(dcps.ConnectionError) as cm:
                dcps.Step(job.path, 0, N, ["servers.shards=tcp://127.0.0.1:9,tcp://127.0.0.1:10"])
            self.assertEqual(cm.exception.code, dcps._dcps.E_TIMEOUT)
            self.assertIsInstance(cm.exception, ConnectionError)  # the builtin, too
            self.assertLess(time.monotonic() - t0, 30)
        finally:
            job.close()


class Arrays(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.job = harness.Job(harness.job_text(workers=1), shards=2)
        cls.step = dcps.Step(cls.job.path, 0, N, [cls.job.shards])
        cls.params = floats(N, 0.5)
        cls.step.start(cls.params)

    @classmethod
    def tearDownClass(cls):
        cls.step.close()
        cls.job.close()

    def refused(self, grad, params, words):
        before = self.step.stats()
        with self.assertRaises(dcps.ArrayError) as cm:
            self.step.run(grad, params)
        self.assertEqual(cm.exception.code, dcps._dcps.E_INVAL)
        for w in words:
            self.assertIn(w, str(cm.exception))
        after = self.step.stats()
        self.assertEqual(before["bytes_sent"], after["bytes_sent"], "something was sent")
        self.assertEqual(before["clock"], after["clock"])

    def test_float64_is_refused(self):
        self.refused(floats(N, 0.0, "d"), self.params, ["grad", "not float32"])

    def test_wrong_length_is_refused_naming_both(self):
        self.refused(floats(N - 1), self.params, ["grad", f"{N - 1} elements", f"{N}"])
        self.refused(floats(N), floats(N + 5), ["params", f"{N + 5} elements"])

    def test_non_contiguous_is_refused(self):
        strided = memoryview(floats(2 * N)).cast("B").cast("f")[::2]
        self.refused(strided, self.params, ["grad", "C-contiguous"])

    def test_read_only_params_are_refused(self):
        self.refused(floats(N), memoryview(bytes(4 * N)).cast("f"), ["params", "writable"])

    def test_same_array_twice_is_refused(self):
        self.refused(self.params, self.params, ["same array"])

    def test_no_buffer_at_all_is_refused(self):
        self.refused([0.0] * N, self.params, ["grad"])

    def test_a_good_step_pushes_and_pulls(self):
        before = self.step.stats()
        grad = floats(N, 1.0)
        self.step.run(grad, self.params, epoch=1)
        after = self.step.stats()
        self.assertEqual(after["clock"], before["clock"] + 1)
        self.assertGreater(after["bytes_pushed"], before["bytes_pushed"] + 4 * N)
        # sgd, lr 0.1, one worker: every parameter moved by -0.1 from what it was
        self.assertAlmostEqual(self.params[0], 0.5 - 0.1 * (after["clock"]), places=5)
        # the shards' lr in force, from the pull's replies: constant schedule
        self.assertEqual(after["lr"], 0.1)


class DeviceArrays(unittest.TestCase):
    """Step.use_stream: device arrays on a CUDA stream. What the job asks for
    that the device path does not do is refused anywhere; without a GPU, device
    arrays are refused; after a refusal the step still takes host arrays."""

    def refused_then_host_arrays_work(self, overrides, error, code, words):
        job = harness.Job(harness.job_text(workers=1), shards=2)
        try:
            step = dcps.Step(job.path, 0, N, [job.shards] + overrides)
            with self.assertRaises(error) as cm:
                step.use_stream(0)
            self.assertEqual(cm.exception.code, code)
            for w in words:
                self.assertIn(w, str(cm.exception))
            params = floats(N, 0.5)
            step.start(params)
            step.run(floats(N, 1.0), params)
            self.assertAlmostEqual(params[0], 0.5 - 0.1, places=5)
            step.close()
        finally:
            job.close()

    def test_an_option_the_device_path_lacks_is_a_config_error_naming_the_key(self):
        self.refused_then_host_arrays_work(["compression.clip_norm=1000"], dcps.ConfigError,
                                           dcps._dcps.E_CONFIG,
                                           ["[compression] clip_norm", "device arrays"])

    @unittest.skipIf(dcps._dcps.gpu_count() > 0, "a GPU is usable here")
    def test_without_a_gpu_device_arrays_are_refused_with_a_sentence(self):
        self.refused_then_host_arrays_work([], dcps.NoGPUError, dcps._dcps.E_NOGPU,
                                           ["device arrays need a GPU", "host (CPU) arrays"])

    @unittest.skipIf(dcps._dcps.gpu_count() == 0, "no GPU")
    def test_with_device_arrays_buffers_are_refused_before_anything_is_sent(self):
        job = harness.Job(harness.job_text(workers=1), shards=2)
        try:
            step = dcps.Step(job.path, 0, N, [job.shards])
            step.use_stream(0)
            with self.assertRaises(dcps.ArrayError) as cm:
                step.start(floats(N))
            self.assertIn("device pointer", str(cm.exception))
            self.assertEqual(step.stats()["pushes"], 0)
            step.close()
        finally:
            job.close()


class Order(unittest.TestCase):
    def test_calls_out_of_order_are_refused_with_a_sentence(self):
        job = harness.Job(harness.job_text(workers=1), shards=2)
        try:
            s = dcps.Step(job.path, 0, N, [job.shards])
            params = floats(N, 0.5)
            with self.assertRaises(dcps.StateError) as cm:
                s.run(floats(N), params)
            self.assertIn("dcps_step_start has not been called", str(cm.exception))
            self.assertEqual(s.stats()["bytes_pushed"], 0)
            s.start(params)
            with self.assertRaises(dcps.StateError) as cm:
                s.start(params)
            self.assertIn("was called already", str(cm.exception))
            s.run(floats(N), params)
            s.finish(params)
            with self.assertRaises(dcps.StateError) as cm:
                s.run(floats(N), params)
            self.assertIn("dcps_step_finish was called already", str(cm.exception))
            s.close()
        finally:
            job.close()


class Threads(unittest.TestCase):
    def test_gil_is_released_while_start_waits_for_rank_0(self):
        """Rank 1's start() waits for rank 0 to initialise the shards. Rank 0 is
        started by another Python thread meanwhile: with the GIL held by the
        wait it could never run, and rank 1 would time out."""
        job = harness.Job(harness.job_text(), shards=2)
        try:
            r1 = dcps.Step(job.path, 1, N, [job.shards])
            ticks = []
            r0_done = threading.Event()

            def other():
                time.sleep(0.3)
                for _ in range(50):
                    ticks.append(time.monotonic())
                    time.sleep(0.001)
                r0 = dcps.Step(job.path, 0, N, [job.shards])
                r0.start(floats(N, 0.25))
                r0_done.set()
                r0.close()

            t = threading.Thread(target=other)
            t0 = time.monotonic()
            t.start()
            params = floats(N)
            r1.start(params)  # returns only after the other thread made rank 0
            t.join()
            self.assertTrue(r0_done.is_set())
            self.assertEqual(len(ticks), 50)
            self.assertGreater(ticks[0], t0)
            self.assertEqual(params[0], 0.25)  # rank 0's parameters, pulled
            r1.close()
        finally:
            job.close()

    def test_a_second_thread_in_the_same_worker_is_refused(self):
        job = harness.Job(harness.job_text(), shards=2)
        try:
            r1 = dcps.Step(job.path, 1, N, [job.shards])
            # rank 1 waits for a rank 0 that never comes: start() blocks
            r1_wait = threading.Thread(target=lambda: _swallow(r1.start, floats(N)))
            r1_wait.start()
            time.sleep(0.3)
            with self.assertRaises(dcps.StateError) as cm:
                r1.run(floats(N), floats(N))
            self.assertIn("another thread", str(cm.exception))
            r0 = dcps.Step(job.path, 0, N, [job.shards])
            r0.start(floats(N))
            r1_wait.join(30)
            self.assertFalse(r1_wait.is_alive())
            r0.close()
            r1.close()
            with self.assertRaises(dcps.StateError):
                r1.run(floats(N), floats(N))
        finally:
            job.close()


def _swallow(fn, *args):
    try:
        fn(*args)
    except dcps.Error:
        pass


if __name__ == "__main__":
    harness.main(need_torch=False)
