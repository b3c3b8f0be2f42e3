"""Install alf_async.

Torch is required as ``torch>=2.1`` so that an installed build (CPU or CUDA) is
kept; the README's install command pins the CPU wheel for a fresh machine.
"""

from setuptools import find_packages, setup

setup(
    name="alf_async",
    version="0.1.0",
    description="Synchronous and asynchronous PPO on batched PyBullet environments, "
                "configured with gin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["alf_async", "alf_async.*"]),
    include_package_data=True,
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
        "test": ["pytest>=7.4", "pytest-timeout>=2.1", "pytest-xdist>=3.5"],
        # Trainer.backend="ray" (docs/distributed.md); tested with Ray 2.60.
        "ray": ["ray>=2.40,<3"],
        # Atari games (docs/pixels.md): ale-py carries the ROMs; gymnasium's
        # AtariPreprocessing resizes frames with opencv. Tested with ale-py 0.12.
        "atari": ["ale-py>=0.9", "opencv-python-headless>=4.8"],
    },
    entry_points={
        "console_scripts": [
            "alf-train=alf_async.bin.train:run_main",
            "alf-sweep=alf_async.bin.sweep:run_main",
            "alf-eps-report=alf_async.bin.eps_report:run_main",
            "alf-play=alf_async.bin.play:run_main",
            "alf-gen-config-docs=alf_async.bin.gen_config_docs:run_main",
            "alf_async_train=alf_async.bin.train:run_main",  # the 0.1 name
        ],
    },
)
