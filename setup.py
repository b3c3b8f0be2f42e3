"""Install alf_async: its metadata and layout (pyproject.toml names the build system).

Torch is required as ``torch>=2.1`` so that an installed build (CPU or CUDA) is
kept; the README's install command pins the CPU wheel for a fresh machine.

The gin files live at the repository's top level, ``gin_configs/``, and ship
inside the package as ``alf_async/gin_configs/`` (a ``package_dir`` mapping), so
that a wheel or a non-editable install finds them by bare name as a checkout does
(``alf_async.config``). The version is declared once, in ``alf_async/__init__.py``.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    """``__version__`` of ``alf_async/__init__.py``, read without importing it."""
    with open(os.path.join(HERE, "alf_async", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.MULTILINE)
    if not match:
        raise RuntimeError("alf_async/__init__.py declares no __version__")
    return match.group(1)


# Folders of the package without an __init__.py that the wheel must carry.
DATA_PACKAGES = ["alf_async.gin_configs", "alf_async.gin_configs.recipes",
                 "alf_async.examples.custom_env"]

setup(
    name="alf_async",
    version=read_version(),
    description="Synchronous and asynchronous PPO on batched PyBullet environments, "
                "configured with gin",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    license="Apache-2.0",
    license_files=["LICENSE"],
    packages=find_packages(include=["alf_async", "alf_async.*"]) + DATA_PACKAGES,
    package_dir={"alf_async.gin_configs": "gin_configs"},
    package_data={"alf_async.gin_configs": ["*.gin"],
                  "alf_async.gin_configs.recipes": ["*.gin"],
                  "alf_async.examples.custom_env": ["*.gin", "*.py"]},
    install_requires=[
        "torch>=2.1",
        "gin-config>=0.5",
        # classic-control brings pygame(-ce), which renders CartPole & co. for
        # `alf-play --record_file`; 1.0 for FrameStackObservation and
        # TimeAwareObservation(normalize_time=...)
        "gymnasium[classic-control]>=1.0",
        "pybullet>=3.2.5",
        "pybullet_envs_gymnasium>=0.6",
        "numpy>=1.24",
        "absl-py>=1.4",
        "tensorboard>=2.14",
        "psutil>=5.9",
        # one BLAS thread in each child process (utils/process.limit_blas_threads)
        "threadpoolctl>=3.1",
        "imageio>=2.31",
        "imageio-ffmpeg>=0.4",  # MP4 recording in alf_async.bin.play
        "matplotlib>=3.7",
    ],
    extras_require={
        # pytest-xdist: the suite runs on two workers (pytest.ini).
        # build and a setuptools that makes wheels by itself: tests/test_packaging.py
        # builds the wheel and the sdist without a network (--no-isolation).
        "test": ["pytest>=7.4", "pytest-timeout>=2.1", "pytest-xdist>=3.5", "build>=1.2",
                 "setuptools>=70.1"],
        # Trainer.backend="ray" (docs/distributed.md); tested with Ray 2.60.
        "ray": ["ray>=2.40,<3"],
        # Atari games (docs/pixels.md): ale-py carries the ROMs; gymnasium's
        # AtariPreprocessing resizes frames with opencv. Tested with ale-py 0.12.
        "atari": ["ale-py>=0.9", "opencv-python-headless>=4.8"],
        # alf-export --format onnx (docs/python_api.md): the exporter and the
        # runtime that checks and runs the exported file.
        "export": ["onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.2"],
        # alf-sweep --search (docs/sweeps.md): the study, its samplers and pruners,
        # kept in SQLite (Optuna's RDB storage). Tested with Optuna 5.0.
        "sweep": ["optuna>=4"],
    },
    entry_points={
        "console_scripts": [
            "alf-train=alf_async.bin.train:run_main",
            "alf-sweep=alf_async.bin.sweep:run_main",
            "alf-eps-report=alf_async.bin.eps_report:run_main",
            "alf-play=alf_async.bin.play:run_main",
            "alf-gen-config-docs=alf_async.bin.gen_config_docs:run_main",
            "alf-export=alf_async.bin.export:run_main",
            "alf_async_train=alf_async.bin.train:run_main",  # the 0.1 name
        ],
    },
)
