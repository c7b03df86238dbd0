//! The panic gate: no kernel in the committed PTX may reach a panic.
//!
//! A panic in a kernel is a `call` to one of `core::panicking`'s functions (a division by zero,
//! an index out of bounds, an overflow check, an `unwrap`), which on nvptx ends in `trap`: the
//! launch fails with an opaque "unspecified launch failure" and the context is lost. The kernels
//! must prove those cases away (or not have them), so the gate reads the PTX, builds its call
//! graph (`.entry NAME(` and `.func ... NAME(` definitions, `call`/`call.uni ... NAME` sites in
//! each body) and reports every `.entry` from which a function whose name contains `panic` is
//! reachable, transitively.

use std::collections::{BTreeMap, BTreeSet};

/// One function defined in the PTX: an `.entry` (kernel) or a `.func`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    pub is_entry: bool,
    /// The callee of each direct call site in the body, in order (indirect calls, through a
    /// register, are not listed).
    pub calls: Vec<String>,
    /// How many `trap` instructions the body holds.
    pub traps: usize,
}

/// Whether a function's name marks it as a panic: Rust's `core::panicking` functions, mangled
/// (`_ZN4core9panicking...` or `_RNv...4core9panicking...`), or any other `panic`-named one.
pub fn is_panic(name: &str) -> bool {
    name.contains("panic")
}

/// The text without `//` and `/* */` comments, line for line (a block comment becomes a space).
fn strip_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut in_block = false;
    for line in ptx.lines() {
        let mut rest = line;
        loop {
            if in_block {
                match rest.find("*/") {
                    Some(end) => {
                        rest = &rest[end + 2..];
                        in_block = false;
                    }
                    None => break,
                }
                continue;
            }
            match (rest.find("//"), rest.find("/*")) {
                (Some(l), b) if b.is_none_or(|b| l < b) => {
                    out.push_str(&rest[..l]);
                    break;
                }
                (_, Some(b)) => {
                    out.push_str(&rest[..b]);
                    out.push(' ');
                    rest = &rest[b + 2..];
                    in_block = true;
                }
                _ => {
                    out.push_str(rest);
                    break;
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The text after a balanced parenthesised group at the start of `s` (which starts with `(`),
/// or None when it does not close.
fn skip_parens(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&s[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.')
}

/// The leading identifier of `s`.
fn leading_name(s: &str) -> &str {
    let end = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
    &s[..end]
}

/// For a line that starts a function (`[.visible|.weak|.extern] .entry|.func [(ret)] NAME`):
/// whether it is an entry, its name, and the rest of the line after the name.
fn function_header(line: &str) -> Option<(bool, &str, &str)> {
    let mut s = line.trim_start();
    loop {
        let next = [".visible", ".weak", ".extern", ".common"]
            .iter()
            .find_map(|d| s.strip_prefix(d).filter(|r| r.starts_with(char::is_whitespace)));
        match next {
            Some(r) => s = r.trim_start(),
            None => break,
        }
    }
    let (is_entry, rest) = if let Some(r) = s.strip_prefix(".entry") {
        (true, r)
    } else if let Some(r) = s.strip_prefix(".func") {
        (false, r)
    } else {
        return None;
    };
    if !(rest.is_empty() || rest.starts_with(|c: char| c.is_whitespace() || c == '(')) {
        return None;
    }
    let mut rest = rest.trim_start();
    if !is_entry && rest.starts_with('(') {
        // The return values: `.func (.param .b32 func_retval0) name(`.
        rest = skip_parens(rest)?.trim_start();
    }
    let name = leading_name(rest);
    if name.is_empty() {
        return None;
    }
    Some((is_entry, name, &rest[name.len()..]))
}

/// One instruction's effect on the call graph.
enum Instruction<'a> {
    Call(&'a str),
    Trap,
    Other,
}

fn instruction(statement: &str) -> Instruction<'_> {
    let mut s = statement.trim_matches(|c: char| c.is_whitespace() || c == '{' || c == '}');
    // A label (`$L__BB0_1:`) and a guard predicate (`@%p1`, `@!%p1`) may come first.
    if let Some(colon) = s.find(':') {
        let label = &s[..colon];
        if !label.is_empty() && label.chars().all(is_name_char) {
            s = s[colon + 1..].trim_start();
        }
    }
    if let Some(guarded) = s.strip_prefix('@') {
        s = guarded.trim_start_matches(|c: char| !c.is_whitespace()).trim_start();
    }
    let opcode = s.split_whitespace().next().unwrap_or_default();
    let is = |op: &str| opcode == op || opcode.strip_prefix(op).is_some_and(|r| r.starts_with('.'));
    if is("trap") {
        return Instruction::Trap;
    }
    if !is("call") {
        return Instruction::Other;
    }
    // `call[.uni] [(ret, ...),] NAME[, (args, ...)][, proto]`.
    let mut rest = s[opcode.len()..].trim_start();
    if rest.starts_with('(') {
        let Some(after) = skip_parens(rest) else { return Instruction::Other };
        rest = after.trim_start().trim_start_matches(',').trim_start();
    }
    let name = leading_name(rest);
    if name.is_empty() || name.starts_with('%') {
        Instruction::Other // an indirect call, through a register
    } else {
        Instruction::Call(name)
    }
}

/// The functions defined in `ptx` (declarations without a body are not listed), in file order.
pub fn parse(ptx: &str) -> Vec<Function> {
    enum State {
        Outside,
        Header(Function),
        Body(Function, usize),
    }
    let text = strip_comments(ptx);
    let mut functions = Vec::new();
    let mut state = State::Outside;
    for line in text.lines() {
        let mut rest = line;
        if let State::Outside = state
            && let Some((is_entry, name, after)) = function_header(line)
        {
            let f = Function { name: name.to_string(), is_entry, ..Default::default() };
            state = State::Header(f);
            rest = after;
        }
        if let State::Header(f) = &mut state {
            // The header ends at `;` (a declaration, e.g. a prototype) or `{` (the body).
            let mut parens = 0usize;
            let mut opened = None;
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => parens += 1,
                    ')' => parens = parens.saturating_sub(1),
                    ';' if parens == 0 => {
                        opened = Some(None);
                        break;
                    }
                    '{' => {
                        opened = Some(Some(i + 1));
                        break;
                    }
                    _ => {}
                }
            }
            match opened {
                None => continue,
                Some(None) => {
                    state = State::Outside;
                    continue;
                }
                Some(Some(body_start)) => {
                    state = State::Body(std::mem::take(f), 1);
                    rest = &rest[body_start..];
                }
            }
        }
        if let State::Body(f, depth) = &mut state {
            for statement in rest.split(';') {
                match instruction(statement) {
                    Instruction::Call(name) => f.calls.push(name.to_string()),
                    Instruction::Trap => f.traps += 1,
                    Instruction::Other => {}
                }
            }
            for c in rest.chars() {
                match c {
                    '{' => *depth += 1,
                    '}' => *depth -= 1,
                    _ => {}
                }
                if *depth == 0 {
                    break;
                }
            }
            if *depth == 0 {
                functions.push(std::mem::take(f));
                state = State::Outside;
            }
        }
    }
    functions
}

/// One panic function that some kernel can reach.
#[derive(Debug, Clone, PartialEq)]
pub struct PanicFunction {
    pub name: String,
    /// Call sites that call it, over the whole file.
    pub call_sites: usize,
    /// Whether a `trap` is reachable through it (in its body or a function it calls).
    pub traps: bool,
}

/// One kernel that can reach a panic.
#[derive(Debug, Clone, PartialEq)]
pub struct PanickingEntry {
    pub entry: String,
    /// The panic functions reachable from it, sorted.
    pub panics: Vec<String>,
    /// Its own call sites that call a panic function directly.
    pub direct_call_sites: usize,
}

/// What the gate found in one PTX text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// How many kernels (`.entry`) the PTX defines.
    pub entries: usize,
    /// The kernels that can reach a panic, in file order.
    pub panicking: Vec<PanickingEntry>,
    /// The panic functions those kernels reach, with their call sites.
    pub panic_functions: Vec<PanicFunction>,
    /// Call sites, over the whole file, whose callee is a panic function reachable from a kernel.
    pub call_sites: usize,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.panicking.is_empty()
    }
}

/// Builds the call graph of `ptx` and reports the kernels from which a panic is reachable.
pub fn check(ptx: &str) -> Report {
    let functions = parse(ptx);
    let by_name: BTreeMap<&str, &Function> = functions.iter().map(|f| (f.name.as_str(), f)).collect();
    // Everything reachable from `start` through calls, `start` excluded unless it recurses.
    let reachable = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(name) = stack.pop() {
            for callee in by_name.get(name).map(|f| f.calls.as_slice()).unwrap_or_default() {
                if seen.insert(callee.as_str()) {
                    stack.push(callee);
                }
            }
        }
        seen
    };
    let mut report = Report::default();
    let mut reached_panics = BTreeSet::new();
    for f in functions.iter().filter(|f| f.is_entry) {
        report.entries += 1;
        let panics: Vec<String> =
            reachable(&f.name).into_iter().filter(|n| is_panic(n)).map(str::to_string).collect();
        if panics.is_empty() {
            continue;
        }
        reached_panics.extend(panics.iter().cloned());
        let direct_call_sites = f.calls.iter().filter(|c| is_panic(c)).count();
        report.panicking.push(PanickingEntry { entry: f.name.clone(), panics, direct_call_sites });
    }
    let mut call_sites: BTreeMap<&str, usize> = BTreeMap::new();
    for callee in functions.iter().flat_map(|f| &f.calls) {
        *call_sites.entry(callee.as_str()).or_default() += 1;
    }
    for name in reached_panics {
        let traps = std::iter::once(name.as_str())
            .chain(reachable(&name))
            .any(|n| by_name.get(n).is_some_and(|f| f.traps > 0));
        let sites = call_sites.get(name.as_str()).copied().unwrap_or(0);
        report.call_sites += sites;
        report.panic_functions.push(PanicFunction { name, call_sites: sites, traps });
    }
    report
}

/// A readable form of a mangled Rust path: `core::panicking::panic_fmt` for
/// `_RNvNtCs7RaYkNzhlAR_4core9panicking9panic_fmt` or `_ZN4core9panicking9panic_fmt17h…E`;
/// the name itself when it does not look like one.
pub fn readable(name: &str) -> String {
    let Some(start) = ["4core", "5alloc", "3std"].iter().filter_map(|c| name.find(c)).min() else {
        return name.to_string();
    };
    let mut parts = Vec::new();
    let mut rest = &name[start..];
    loop {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let Ok(len) = rest[..digits].parse::<usize>() else { break };
        let Some(part) = rest.get(digits..digits + len) else { break };
        // The legacy mangling ends in a hash segment, `h` and 16 hex digits.
        if !(part.len() == 17 && part.starts_with('h') && part[1..].chars().all(|c| c.is_ascii_hexdigit())) {
            parts.push(part);
        }
        rest = &rest[digits + len..];
    }
    if parts.is_empty() { name.to_string() } else { parts.join("::") }
}

/// The gate's verdict on one PTX file named `file`: Ok with a one-line summary when no kernel
/// can reach a panic, else Err naming the kernels, the panic functions and the call sites.
pub fn verdict(file: &str, ptx: &str) -> Result<String, String> {
    let report = check(ptx);
    if report.is_clean() {
        return Ok(format!("panic gate: {file}: none of its {} kernels can reach a panic", report.entries));
    }
    let mut s = format!(
        "panic gate: {file}: {} of {} kernels can reach a panic ({} call sites to panic functions):\n",
        report.panicking.len(),
        report.entries,
        report.call_sites
    );
    s += "  panic functions:\n";
    for p in &report.panic_functions {
        s += &format!(
            "    {} ({} call site{}{}): {}\n",
            readable(&p.name),
            p.call_sites,
            if p.call_sites == 1 { "" } else { "s" },
            if p.traps { ", ends in trap" } else { "" },
            p.name
        );
    }
    s += "  kernels:\n";
    for e in &report.panicking {
        let panics: Vec<String> = e.panics.iter().map(|p| readable(p)).collect();
        s += &format!(
            "    {} ({} direct call site{}): {}\n",
            e.entry,
            e.direct_call_sites,
            if e.direct_call_sites == 1 { "" } else { "s" },
            panics.join(", ")
        );
    }
    s += "  A kernel must not panic (it traps, and the launch fails without a message): remove the \
          division, index or check that can panic (e.g. divide by a value proven non-zero).";
    Err(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIV_PANIC: &str = "_RNvNtNtCs7RaYkNzhlAR_4core9panicking11panic_const23panic_const_div_by_zero";
    const PANIC_FMT: &str = "_RNvNtCs7RaYkNzhlAR_4core9panicking9panic_fmt";

    /// A PTX text in the shape LLVM writes: a prototype of the panic function, kernels, then the
    /// panic functions' definitions.
    fn synthetic(kernels: &str) -> String {
        format!(
            r#"//
// Generated by LLVM NVPTX Back-End
//

.version 7.0
.target sm_80
.address_size 64

	// .globl	k                       // -- Begin function k
.func {DIV_PANIC}
(
	.param .b64 {DIV_PANIC}_param_0
)
.noreturn;
{kernels}
.func {PANIC_FMT}(
	.param .b64 {PANIC_FMT}_param_0
)
.noreturn                               // -- Begin function {PANIC_FMT}
{{
// %bb.0:
	trap; exit;
                                        // -- End function
}}
.func {DIV_PANIC}(
	.param .b64 {DIV_PANIC}_param_0
)
.noreturn
{{
// %bb.0:
	{{ // callseq 35, 0
	.param .b64 	param0;
	call.uni {PANIC_FMT}, (param0);
	}} // callseq 35
	// begin inline asm
	exit;
	// end inline asm
}}
"#
        )
    }

    const CLEAN_KERNEL: &str = r#"
.visible .entry clean(
	.param .align 8 .b8 clean_param_0[40]
)
.maxntid 128, 1, 1
{
	.reg .b32 	%r<3>;
// %bb.0:
	mov.u32 	%r1, %tid.x;
	ret;
}
"#;

    /// A kernel that calls a helper `.func` (with a return value) that divides and may panic.
    const HELPER_KERNEL: &str = r#"
.func  (.param .b32 func_retval0) helper(
	.param .b32 helper_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	ld.param.b32 	%r1, [helper_param_0];
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB1_2;
	div.u32 	%r2, 7, %r1;
	st.param.b32 	[func_retval0], %r2;
	ret;
$L__BB1_2:
	{ // callseq 0, 0
	.param .b64 	param0;
	call.uni _RNvNtNtCs7RaYkNzhlAR_4core9panicking11panic_const23panic_const_div_by_zero, (param0);
	} // callseq 0
	exit;
}
.visible .entry divides(
	.param .align 8 .b8 divides_param_0[40]
)
{
	.reg .b32 	%r<3>;
	{ // callseq 1, 0
	.param .b32 	param0;
	.param .b32 	retval0;
	st.param.b32 	[param0], %r1;
	call.uni (retval0), helper, (param0);
	ld.param.b32 	%r2, [retval0];
	} // callseq 1
	ret;
}
"#;

    #[test]
    fn an_entry_calling_a_func_that_calls_a_panic_is_reported() {
        let report = check(&synthetic(&format!("{CLEAN_KERNEL}{HELPER_KERNEL}")));
        assert_eq!(report.entries, 2);
        assert_eq!(report.panicking.len(), 1);
        let e = &report.panicking[0];
        assert_eq!(e.entry, "divides");
        assert_eq!(e.panics, [PANIC_FMT, DIV_PANIC]);
        assert_eq!(e.direct_call_sites, 0, "it reaches the panic through `helper`");
        // helper -> div_by_zero, div_by_zero -> panic_fmt.
        assert_eq!(report.call_sites, 2);
        assert!(report.panic_functions.iter().all(|p| p.traps), "{:?}", report.panic_functions);
        let err = verdict("k.ptx", &synthetic(HELPER_KERNEL)).unwrap_err();
        assert!(err.contains("1 of 1 kernels can reach a panic"), "{err}");
        assert!(err.contains("divides (0 direct call sites)"), "{err}");
        assert!(err.contains("core::panicking::panic_const::panic_const_div_by_zero"), "{err}");
        assert!(err.contains(DIV_PANIC), "{err}");
    }

    #[test]
    fn an_entry_calling_a_panic_directly_is_reported_with_its_call_sites() {
        let kernel = format!(
            ".visible .entry k(\n\t.param .b64 k_param_0\n)\n{{\n\t@%p1 bra $L__BB0_2;\n\tret;\n\
             $L__BB0_2:\n\t{{ // callseq 0, 0\n\t.param .b64 \tparam0;\n\tcall.uni {DIV_PANIC}, (param0);\n\t}}\n\
             \t@%p2 call.uni {DIV_PANIC}, (param0);\n\texit;\n}}\n"
        );
        let report = check(&synthetic(&kernel));
        assert_eq!(report.panicking.len(), 1);
        assert_eq!(report.panicking[0].direct_call_sites, 2);
        // Two in the kernel, one (to panic_fmt) in the div-by-zero function.
        assert_eq!(report.call_sites, 3);
    }

    #[test]
    fn an_entry_with_no_calls_is_clean() {
        let report = check(&synthetic(CLEAN_KERNEL));
        assert_eq!(report.entries, 1);
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.call_sites, 0);
        assert_eq!(
            verdict("k.ptx", &synthetic(CLEAN_KERNEL)).unwrap(),
            "panic gate: k.ptx: none of its 1 kernels can reach a panic"
        );
    }

    #[test]
    fn a_panic_function_defined_but_never_called_is_clean() {
        // The panic functions are defined (and declared) and call each other, but no kernel
        // calls them; a comment that mentions a call does not count either.
        let kernel = format!("{CLEAN_KERNEL}// call.uni {DIV_PANIC}, (param0);\n");
        let report = check(&synthetic(&kernel));
        assert!(report.is_clean(), "{report:?}");
        let functions = parse(&synthetic(&kernel));
        let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["clean", PANIC_FMT, DIV_PANIC], "the prototype is not a definition");
        assert_eq!(functions[1].traps, 1);
        assert_eq!(functions[2].calls, [PANIC_FMT]);
    }

    #[test]
    fn call_sites_with_return_values_predicates_and_prototypes_name_the_callee() {
        assert!(matches!(instruction("\tcall.uni (retval0), helper, (param0)"), Instruction::Call("helper")));
        assert!(matches!(instruction(" @!%p3 call.uni f, (param0)"), Instruction::Call("f")));
        assert!(matches!(instruction("call (retval0, retval1), g, (a, b)"), Instruction::Call("g")));
        assert!(matches!(instruction("call %rd4, (param0), prototype_0"), Instruction::Other));
        assert!(matches!(instruction("$L__BB0_1: trap"), Instruction::Trap));
        assert!(matches!(instruction("callseq"), Instruction::Other));
        assert!(matches!(instruction("mov.u32 %r1, %tid.x"), Instruction::Other));
    }

    #[test]
    fn comments_hide_calls_and_braces() {
        let text = "a // call.uni f, (p); {\nb /* call.uni g; { */ c /* multi\nline } */ d\n";
        assert_eq!(strip_comments(text), "a \nb   c  \n d\n");
        let kernel = "/* .entry commented( */\n.entry k(\n)\n{ /* } */\n\tcall.uni real, (p); // }\n}\n";
        let functions = parse(kernel);
        assert_eq!(functions.len(), 1);
        assert_eq!(
            (functions[0].name.as_str(), functions[0].calls.as_slice()),
            ("k", &["real".to_string()][..])
        );
    }

    #[test]
    fn the_gate_is_fast_on_a_large_file() {
        // The committed PTX has ~110,000 lines, most with a `//` comment: the parse must be
        // linear (it once rescanned the rest of the file for each comment).
        let kernel = format!("{CLEAN_KERNEL}{HELPER_KERNEL}");
        let body = "\tmov.u32 \t%r1, %tid.x;                 // a comment\n".repeat(120_000);
        let big = synthetic(&format!("{kernel}.visible .entry big(\n)\n{{\n{body}\tret;\n}}\n"));
        let start = std::time::Instant::now();
        let report = check(&big);
        assert_eq!((report.entries, report.panicking.len()), (3, 1));
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    }

    #[test]
    fn mangled_panic_names_read_as_paths() {
        assert_eq!(readable(DIV_PANIC), "core::panicking::panic_const::panic_const_div_by_zero");
        assert_eq!(readable(PANIC_FMT), "core::panicking::panic_fmt");
        assert_eq!(
            readable("_ZN4core9panicking9panic_fmt17h0123456789abcdefE"),
            "core::panicking::panic_fmt"
        );
        assert_eq!(readable("my_panic"), "my_panic");
    }

    /// The gate on the committed PTX (no rebuild); `cargo xtask ptx --check` runs the same gate.
    #[test]
    fn committed_ptx_reaches_no_panic() {
        let dir = crate::util::root().join("host/ptx");
        let mut failures = Vec::new();
        for file in ["flashattn_sm80.ptx", "flashattn_sm90a.ptx"] {
            let ptx = std::fs::read_to_string(dir.join(file)).expect("committed PTX");
            match verdict(file, &ptx) {
                Ok(line) => println!("{line}"),
                Err(message) => {
                    println!("{message}");
                    failures.push(file);
                }
            }
        }
        assert!(failures.is_empty(), "the panic gate fails on {failures:?}");
    }
}
