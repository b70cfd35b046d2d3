//! The id and queue-name rules every store keeps, so that one id or name
//! works on each: non-empty UTF-8 of at most 512 bytes without NUL
//! (PostgreSQL text cannot hold one); a queue name also without braces (it
//! goes between the braces of every Redis key's hash tag).

const MAX_LEN: usize = 512;

/// Why `id` (an entry's id or a schedule's name) breaks the rules, if it does.
pub(crate) fn id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("an id must not be empty".into());
    }
    if id.len() > MAX_LEN {
        return Some(format!(
            "an id has at most {MAX_LEN} bytes, this one has {}",
            id.len()
        ));
    }
    if id.contains('\0') {
        return Some(format!(
            "{id:?} holds a NUL character, which no store accepts (PostgreSQL text cannot)"
        ));
    }
    None
}

/// Why `name` (a queue's name) breaks the rules, if it does.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a queue name must not be empty".into());
    }
    if name.len() > MAX_LEN {
        return Some(format!(
            "a queue name has at most {MAX_LEN} bytes, this one has {}",
            name.len()
        ));
    }
    if name.contains(['{', '}', '\0']) {
        return Some(format!(
            "{name:?} contains a brace or a NUL character (a brace would break the \
             hash tag of its Redis keys, and PostgreSQL text cannot hold a NUL)"
        ));
    }
    None
}
