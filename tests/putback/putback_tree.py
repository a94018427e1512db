"""What tests/putback/run and tests/putback/fuzz share: a scratch copy of HEAD
and the exact text replacements that take a fix out of it and put it back."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def export_head(src):
    """HEAD's tree into `src` (kept as it is if it exists: --keep)."""
    if os.path.isdir(src):
        return
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", ROOT, "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)


def texts_with_bug(src, edits, finding, script):
    """edits: [(file, [(fixed text, buggy text), ...]), ...]. Returns
    (fixed, buggy), each {file: its text}, or None (said why) when a fix's
    text is no longer in its file: a change that moved the code must make
    the script say so, not test nothing."""
    fixed, buggy = {}, {}
    for file, pairs in edits:
        with open(os.path.join(src, file)) as f:
            fixed[file] = f.read()
        buggy[file] = fixed[file]
        for good, evil in pairs:
            if good not in buggy[file]:
                print(f"finding {finding}: the fix's text is no longer in {file}: update {script}")
                return None
            buggy[file] = buggy[file].replace(good, evil, 1)
    return fixed, buggy


def write_texts(src, texts):
    for file, text in texts.items():
        with open(os.path.join(src, file), "w") as f:
            f.write(text)


def check_texts(findings, script):
    """findings: [(finding, edits)], edits as texts_with_bug takes them.
    Says which findings' fix texts are no longer in their files in this tree
    (ROOT), and returns how many: `--check`, no build, which ./tools/test runs
    (ctest), so that a change moving guarded code is caught when it lands,
    not the next time someone puts the bugs back."""
    return sum(texts_with_bug(ROOT, edits, finding, script) is None for finding, edits in findings)
