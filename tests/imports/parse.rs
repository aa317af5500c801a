//! Reading Rust source for the import check: a tokenizer that skips comments, literals and
//! test code, and a parser that collects the crate-internal paths a file names.

use std::collections::{BTreeSet, HashMap};

use super::ModPath;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// Tokens of Rust source, without comments, literals and lifetimes. Only what the path
/// collection needs: identifiers, `::` and single punctuation.
fn tokenize(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let n = c.len();
    while i < n {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < n && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < n {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(&c, i + 1);
        } else if let Some((hashes, body)) =
            raw_string_start(&c, i).filter(|_| !prev_is_ident_char(&c, i))
        {
            i = body;
            if hashes == usize::MAX {
                // b"…": an ordinary string with escapes.
                i = skip_string(&c, i);
            } else {
                loop {
                    if i >= n {
                        break;
                    }
                    if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
            }
        } else if ch == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < n && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < n && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < n && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch.is_ascii_digit() {
            while i < n && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                // `1..2` is a range, not a number with two dots.
                if c[i] == '.' && c.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::Sep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn prev_is_ident_char(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// At `r"`, `r#"`, `br"`, `b"`: the number of `#`s (`usize::MAX` for `b"`, which has
/// escapes) and the index after the opening quote.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
        if c.get(j) == Some(&'"') {
            return Some((usize::MAX, j + 1));
        }
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// From just after an opening `"`, the index after the closing one.
fn skip_string(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// One source file.
pub(super) struct File {
    pub(super) rel: String,
    pub(super) module: ModPath,
    /// Crate-internal paths it names: (the path as written, resolved to absolute segments).
    pub(super) uses: Vec<(String, ModPath)>,
    /// Names bound by its top-level `use` items, to the absolute path they import.
    pub(super) bindings: HashMap<String, ModPath>,
    /// Child modules declared `#[cfg(test)] mod x;`.
    pub(super) test_children: BTreeSet<String>,
}

/// One leaf of a `use` tree: the path and the name it binds (`None` for a glob).
fn use_leaves(
    toks: &[Tok],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut path: Vec<String> = prefix.to_vec();
    if toks.get(i) == Some(&Tok::Sep) {
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Punct('$')) => i += 1,
            Some(Tok::Ident(id)) if id != "as" => {
                path.push(id.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::Sep) {
                    i += 1;
                    continue;
                }
                let mut name = path.last().cloned();
                if matches!(toks.get(i), Some(Tok::Ident(a)) if a == "as") {
                    if let Some(Tok::Ident(alias)) = toks.get(i + 1) {
                        name = Some(alias.clone());
                    }
                    i += 2;
                }
                if name.as_deref() == Some("self") {
                    path.pop();
                    name = path.last().cloned();
                }
                out.push((path, name));
                return i;
            }
            Some(Tok::Punct('*')) => {
                out.push((path, None));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_leaves(toks, i, &path, out),
                    }
                }
            }
            _ => return i,
        }
    }
}

/// Makes a path absolute, relative to `module`; `None` for a path into another crate.
fn absolute(path: &[String], module: &[String], children: &BTreeSet<String>) -> Option<ModPath> {
    let mut base: ModPath = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) if children.contains(first) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Skips one item (after its attributes): to the end of its `{ … }` block or its `;`.
fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    while toks.get(i) == Some(&Tok::Punct('#')) {
        i = skip_group(toks, i + 1);
    }
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => return skip_group(toks, i),
            _ => i += 1,
        }
    }
    i
}

/// At an opening bracket, the index after its match.
fn skip_group(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        match toks[i] {
            Tok::Punct('{' | '[' | '(') => depth += 1,
            Tok::Punct('}' | ']' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

fn is_cfg_test(toks: &[Tok], i: usize) -> bool {
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    toks.len() >= i + want.len() && toks[i..i + want.len()] == want
}

/// Child modules declared in `toks` (file modules and inline ones), at the top level.
fn declared_children(toks: &[Tok]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in toks.windows(3) {
        if let [Tok::Ident(m), Tok::Ident(name), Tok::Punct(';' | '{')] = w {
            if m == "mod" {
                out.insert(name.clone());
            }
        }
    }
    out
}

pub(super) fn parse(rel: &str, module: ModPath, src: &str) -> File {
    let toks = tokenize(src);
    let mut file = File {
        rel: rel.to_string(),
        module: module.clone(),
        uses: Vec::new(),
        bindings: HashMap::new(),
        test_children: BTreeSet::new(),
    };
    // The module of each inline `mod x {`, with the brace depth it closes at.
    let mut stack: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    let children_of = |stack: &[(String, i32)]| -> BTreeSet<String> {
        // Children of the current module: for the file's own module, every `mod` it declares
        // at any level is close enough (inline modules are few and distinct).
        let _ = stack;
        declared_children(&toks)
    };
    while i < toks.len() {
        if is_cfg_test(&toks, i) {
            let j = i + 7;
            if let [Tok::Ident(m), Tok::Ident(name), Tok::Punct(';')] =
                &toks[j..(j + 3).min(toks.len())]
            {
                if m == "mod" {
                    file.test_children.insert(name.clone());
                }
            }
            i = skip_item(&toks, j);
            continue;
        }
        let current: ModPath = module
            .iter()
            .cloned()
            .chain(stack.iter().map(|(m, _)| m.clone()))
            .collect();
        match &toks[i] {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth -= 1;
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    stack.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let mut leaves = Vec::new();
                let end = use_leaves(&toks, i + 1, &[], &mut leaves);
                let children = children_of(&stack);
                for (path, name) in leaves {
                    let Some(abs) = absolute(&path, &current, &children) else {
                        continue;
                    };
                    file.uses.push((path.join("::"), abs.clone()));
                    if let (Some(name), true) = (name, stack.is_empty() && depth == 0) {
                        file.bindings.insert(name, abs);
                    }
                }
                i = end.max(i + 1);
            }
            Tok::Ident(first) => {
                let starts_path = toks.get(i + 1) == Some(&Tok::Sep)
                    && !matches!(i.checked_sub(1).map(|p| &toks[p]), Some(Tok::Sep));
                if !starts_path {
                    i += 1;
                    continue;
                }
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Sep) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(s)) => {
                            path.push(s.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if let Some(abs) = absolute(&path, &current, &children_of(&stack)) {
                    file.uses.push((path.join("::"), abs));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    file
}
