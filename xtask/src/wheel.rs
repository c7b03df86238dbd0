//! The Python part of `cargo xtask bundle`: the abi3 wheel (built with maturin, as `.ci/run`
//! does), the pure-Python wheels pytest needs (the GPU machine has no network) and the Python
//! tests, so that `bundle/run.sh python` installs the wheel into a fresh virtual environment and
//! runs its tests there.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{Result, root, run, run_fetching, which};

/// The virtual environment that holds maturin: the one `.ci/run` makes, shared with it.
const VENV: &str = "target/py-ci";
/// Where the wheel is built (emptied first, so that it holds exactly one wheel).
const WHEEL_DIR: &str = "target/bundle-wheel";
/// The pinned pure-Python wheels the bundle carries for pytest.
pub const REQUIREMENTS: &str = "python/requirements-bundle.txt";
/// How they are downloaded: wheels only, each as named (the list pins every dependency), and
/// pure-Python ones for any CPython ≥ 3.10 (pytest's least) whatever this machine's Python is
/// (tomli, for one, also has compiled wheels).
const DOWNLOAD: &[&str] = &[
    "--only-binary=:all:",
    "--no-deps",
    "--platform=any",
    "--implementation=py",
    "--abi=none",
    "--python-version=3.10",
];
/// Where they are downloaded once: a copy of [`REQUIREMENTS`] and [`DOWNLOAD`] in it says what it
/// holds, and a bundle made with the same list and options downloads nothing.
const DEPS_CACHE: &str = "target/bundle-python-deps";
/// The file in a bundle without a wheel that says why; `run.sh python` prints it.
pub const NO_WHEEL: &str = "python/NO_WHEEL";
/// The same for a bundle without the pytest wheels.
pub const NO_DEPS: &str = "python/NO_DEPS";

const BY_HAND: &str = "run `cargo xtask bundle` where the Python package index can be reached";

/// The Python interpreter of [`VENV`], creating the environment (with maturin, from
/// `python/requirements-ci.txt`) when it has none.
fn venv_python() -> Result<PathBuf> {
    let venv = root().join(VENV);
    let python = venv.join("bin/python");
    if !venv.join("bin/pip").is_file() {
        let python3 = which("python3").ok_or("python3 not found on PATH")?;
        // --clear: an earlier attempt without ensurepip leaves an environment without pip.
        run(Command::new(python3).args(["-m", "venv", "--clear"]).arg(&venv)).map_err(|e| {
            format!("{e}: could not make the virtual environment {VENV} (is python3-venv installed?)")
        })?;
    }
    let requirements = root().join("python/requirements-ci.txt");
    run_fetching(
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "-r"]).arg(&requirements),
        "the Python package index (maturin, python/requirements-ci.txt)",
        BY_HAND,
    )?;
    Ok(python)
}

/// Builds the release wheel with maturin and returns its path.
pub fn build_wheel() -> Result<PathBuf> {
    let python = venv_python()?;
    let maturin = python.with_file_name("maturin");
    let dir = root().join(WHEEL_DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    run(Command::new(&maturin)
        .current_dir(root())
        .args(["build", "--release", "-m", "python/Cargo.toml", "--out"])
        .arg(&dir))?;
    let wheels = files_ending(&dir, ".whl")?;
    match wheels.as_slice() {
        [one] if file_name(one).starts_with("flashattn-") => Ok(one.clone()),
        _ => {
            Err(format!("maturin left {} wheels in {}, not one flashattn wheel", wheels.len(), dir.display()))
        }
    }
}

/// The package names and pins of a requirements file (`name==version` lines; comments and blank
/// lines skipped). Anything else is an error: the wheels are downloaded with --no-deps, so every
/// one must be named and pinned.
pub fn pins(requirements: &str) -> Result<Vec<(String, String)>> {
    let mut pins = Vec::new();
    for line in requirements.lines().map(|l| l.split('#').next().unwrap_or("").trim()) {
        if line.is_empty() {
            continue;
        }
        match line.split_once("==") {
            Some((name, version)) if !name.trim().is_empty() && !version.trim().is_empty() => {
                pins.push((name.trim().to_string(), version.trim().to_string()))
            }
            _ => return Err(format!("{REQUIREMENTS}: `{line}` is not `name==version`")),
        }
    }
    Ok(pins)
}

/// Downloads the wheels of [`REQUIREMENTS`] into [`DEPS_CACHE`], unless it holds them already,
/// and returns them. They must be pure Python (`-none-any.whl`): the GPU machine's Python may
/// not be this one.
pub fn download_deps() -> Result<Vec<PathBuf>> {
    let requirements_path = root().join(REQUIREMENTS);
    let requirements = std::fs::read_to_string(&requirements_path)
        .map_err(|e| format!("{}: {e}", requirements_path.display()))?;
    let expected = pins(&requirements)?.len();
    let dir = root().join(DEPS_CACHE);
    // What the cache holds: the list and how it was downloaded.
    let stamp = dir.join("requirements.txt");
    let stamped = format!("{requirements}# pip download {}\n", DOWNLOAD.join(" "));
    let cached = std::fs::read_to_string(&stamp).is_ok_and(|s| s == stamped)
        && files_ending(&dir, ".whl").is_ok_and(|w| w.len() == expected);
    if !cached {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // This machine's pip: the environment's if it exists, else python3's.
        let venv = root().join(VENV).join("bin/python");
        let python =
            if venv.is_file() { venv } else { which("python3").ok_or("python3 not found on PATH")? };
        run_fetching(
            Command::new(python)
                .args(["-m", "pip", "download", "--quiet"])
                .args(DOWNLOAD)
                .arg("-r")
                .arg(&requirements_path)
                .arg("-d")
                .arg(&dir),
            &format!("the Python package index (the wheels of {REQUIREMENTS})"),
            BY_HAND,
        )?;
        std::fs::write(&stamp, &stamped).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    let wheels = files_ending(&dir, ".whl")?;
    if wheels.len() != expected {
        return Err(format!(
            "{} holds {} wheels, {REQUIREMENTS} names {expected}",
            dir.display(),
            wheels.len()
        ));
    }
    if let Some(binary) = wheels.iter().find(|w| !file_name(w).ends_with("-none-any.whl")) {
        return Err(format!("{} is not a pure-Python wheel ({REQUIREMENTS})", file_name(binary)));
    }
    Ok(wheels)
}

/// What the Python part of a bundle is made of; a part that could not be made holds why.
pub struct PythonParts {
    pub wheel: Result<PathBuf>,
    pub deps: Result<Vec<PathBuf>>,
}

/// Builds the wheel and fetches the pytest wheels (before the bundle folder is touched).
pub fn prepare() -> PythonParts {
    PythonParts { wheel: build_wheel(), deps: download_deps() }
}

/// Copies the Python part into the bundle `out` and returns what it wrote, for the listing; a
/// missing part is written as a note that `run.sh python` prints.
pub fn copy_into(out: &Path, parts: &PythonParts) -> Result<Vec<String>> {
    let mut listed = Vec::new();
    let python = out.join("python");
    let mkdir = |d: &Path| std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()));
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).map(|_| ()).map_err(|e| format!("copying {}: {e}", from.display()))
    };
    mkdir(&python)?;
    match &parts.wheel {
        Ok(wheel) => {
            mkdir(&python.join("wheels"))?;
            copy(wheel, &python.join("wheels").join(file_name(wheel)))?;
            listed.push(format!("python/wheels/{}", file_name(wheel)));
        }
        Err(why) => std::fs::write(out.join(NO_WHEEL), format!("{why}\n")).map_err(|e| e.to_string())?,
    }
    match &parts.deps {
        Ok(wheels) => {
            mkdir(&python.join("deps"))?;
            for wheel in wheels {
                copy(wheel, &python.join("deps").join(file_name(wheel)))?;
            }
            listed.push(format!("python/deps ({} wheels)", wheels.len()));
        }
        Err(why) => std::fs::write(out.join(NO_DEPS), format!("{why}\n")).map_err(|e| e.to_string())?,
    }
    // The tests, and the benchmark scripts (`run.sh python-ratios`).
    for folder in ["tests", "bench"] {
        let from = root().join("python").join(folder);
        mkdir(&python.join(folder))?;
        let mut sources = std::fs::read_dir(&from)
            .map_err(|e| format!("{}: {e}", from.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            // Sources only: no __pycache__ or .pytest_cache from local runs.
            .filter(|p| p.is_file() && !file_name(p).starts_with('.'))
            .collect::<Vec<_>>();
        sources.sort();
        for source in &sources {
            copy(source, &python.join(folder).join(file_name(source)))?;
        }
        listed.push(format!("python/{folder} ({} files)", sources.len()));
    }
    Ok(listed)
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap_or_default().to_string_lossy().into_owned()
}

/// The files in `dir` whose names end with `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && file_name(p).ends_with(suffix))
        .collect::<Vec<_>>();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &str) -> String {
        std::fs::read_to_string(root().join(path)).unwrap()
    }

    #[test]
    fn the_bundle_carries_ci_s_pytest_and_its_dependencies_pinned() {
        let bundle = pins(&read(REQUIREMENTS)).unwrap();
        let names = bundle.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>();
        for needed in ["pytest", "pluggy", "iniconfig", "packaging", "pygments", "exceptiongroup", "tomli"] {
            assert!(names.contains(&needed), "{REQUIREMENTS} lacks {needed}: {names:?}");
        }
        // numpy and torch are the GPU machine's own (and not pure Python): never carried.
        assert!(!names.iter().any(|n| ["numpy", "torch", "maturin"].contains(n)), "{names:?}");
        let ci = read("python/requirements-ci.txt");
        let ci_pytest = ci.lines().find_map(|l| l.trim().strip_prefix("pytest==")).expect("CI pins pytest");
        let ours = bundle.iter().find(|(n, _)| n == "pytest").map(|(_, v)| v.as_str());
        assert_eq!(ours, Some(ci_pytest), "the bundle's pytest is not the one CI tests with");
    }

    #[test]
    fn a_bundle_without_the_wheel_or_pytest_says_why_and_still_carries_the_tests() {
        let out = tempfile::tempdir().unwrap();
        let parts = PythonParts { wheel: Err("maturin failed".into()), deps: Err("no network".into()) };
        let listed = copy_into(out.path(), &parts).unwrap();
        assert_eq!(std::fs::read_to_string(out.path().join(NO_WHEEL)).unwrap(), "maturin failed\n");
        assert_eq!(std::fs::read_to_string(out.path().join(NO_DEPS)).unwrap(), "no network\n");
        assert!(!out.path().join("python/wheels").exists() && !out.path().join("python/deps").exists());
        assert!(out.path().join("python/tests/test_numpy.py").is_file(), "{listed:?}");
        assert!(out.path().join("python/tests/reference.py").is_file());
        assert!(!out.path().join("python/tests/__pycache__").exists());
    }

    #[test]
    fn pins_reads_name_version_lines_and_refuses_unpinned_ones() {
        let text = "# comment\n\npytest==9.2.0  # trailing\n tomli == 2.5.0\n";
        assert_eq!(
            pins(text).unwrap(),
            vec![("pytest".into(), "9.2.0".into()), ("tomli".into(), "2.5.0".into())]
        );
        assert!(pins("pytest>=9\n").is_err());
        assert!(pins("pytest\n").is_err());
    }

    #[test]
    fn the_python_tests_import_only_what_the_bundle_or_the_gpu_machine_has() {
        // The standard library, the tests' own modules, the wheel, the carried pytest, and NumPy
        // and PyTorch (installed on the GPU machine).
        let allowed = ["inspect", "math", "os", "sys", "reference", "flashattn", "pytest", "numpy", "torch"];
        for entry in std::fs::read_dir(root().join("python/tests")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "py") {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let module = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["import", m, ..] | ["from", m, "import", ..] => m.split('.').next().unwrap().to_string(),
                    _ => continue,
                };
                assert!(
                    allowed.contains(&module.as_str()),
                    "{} imports {module}: carry it in {REQUIREMENTS} or allow it here",
                    path.display()
                );
            }
        }
    }
}
