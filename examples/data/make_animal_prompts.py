#!/usr/bin/env python3
"""Writes the labelled prompt files of the probe example: short TinyStories-style sentences about
an animal (label true) or a thing (label false). Deterministic; the outputs are committed.

    python3 examples/data/make_animal_prompts.py examples/data
"""
import itertools
import json
import os
import random
import sys

ANIMALS = ["dog", "cat", "bird", "fish", "bunny", "frog", "duck", "bear", "cow", "puppy"]
THINGS = ["ball", "car", "doll", "tree", "boat", "box", "toy", "cake", "book", "hat"]
NAMES = ["Lily", "Tom", "Ben", "Sue", "Max", "Anna", "Tim", "Mia"]
TEMPLATES = [
    "Once upon a time, there was a little {noun}.",
    "{name} saw a big {noun} in the park.",
    "One day, {name} found a {noun} near the house.",
    "{name} loved the {noun} very much.",
    "The {noun} was red and happy.",
    "{name} and mom looked at the {noun}.",
]


def main(out_dir):
    rng = random.Random(260)
    prompts = set()
    for template, noun, name in itertools.product(TEMPLATES, ANIMALS + THINGS, NAMES):
        prompts.add((template.format(noun=noun, name=name), noun in ANIMALS))
    prompts = sorted(prompts)
    rng.shuffle(prompts)
    splits = {"animals_train.jsonl": prompts[:200], "animals_heldout.jsonl": prompts[200:240]}
    for name, chosen in splits.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            for i, (text, animal) in enumerate(chosen):
                f.write(json.dumps({"id": f"{name.split('_')[1].split('.')[0]}-{i:03d}",
                                    "prompt": text, "label": animal}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
