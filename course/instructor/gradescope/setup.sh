#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (Ubuntu, as root). The zip holds zerosim's
# source under zerosim/ (see course/README.md); nothing is fetched at grading time.
set -euo pipefail
apt-get install -y python3 python3-pip python3-venv
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install /autograder/source/zerosim
