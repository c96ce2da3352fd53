//! Parsing of `#[subscriber(...)]` arguments.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, LitStr, Path, Token};

mod kw {
    syn::custom_keyword!(publish);
    syn::custom_keyword!(name);
    syn::custom_keyword!(capacity);
    syn::custom_keyword!(stall_timeout);
    syn::custom_keyword!(batch);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(dead_letter);
    syn::custom_keyword!(reply);
}

/// What may follow the topic, for error messages.
pub(crate) const VALID: &str =
    "`publish(\"topic\")`, `name = \"...\"`, `capacity = N`, `stall_timeout = \"500ms\"`, `batch`, `reply`, `retry(attempts = 3, backoff = \"10ms\")`, `dead_letter(\"topic\")`, `crate = \"path\"`";

/// What `retry(..)` takes, for error messages.
pub(crate) const RETRY_VALID: &str =
    "`attempts = N`, `backoff = \"10ms\"`, `max_backoff = \"1s\"` (durations as strings or `Duration` expressions), `multiplier = 2.0`, `jitter = true|false`, `panics = true|false`";

/// The names `retry(..)` takes, for "did you mean" suggestions.
const RETRY_NAMES: &[&str] = &[
    "attempts",
    "backoff",
    "max_backoff",
    "multiplier",
    "jitter",
    "panics",
];

/// The argument names, for "did you mean" suggestions.
const NAMES: &[&str] = &[
    "publish",
    "name",
    "capacity",
    "stall_timeout",
    "batch",
    "reply",
    "retry",
    "dead_letter",
    "crate",
];

/// The argument name `word` was probably meant to be: the nearest by edit distance (ignoring
/// case), if it is at most 2 edits away (1 for words of up to 4 letters) and not `word` itself.
pub(crate) fn did_you_mean(word: &str) -> Option<&'static str> {
    nearest(word, NAMES)
}

/// The name of `names` nearest to `word` (see [`did_you_mean`]).
fn nearest(word: &str, names: &[&'static str]) -> Option<&'static str> {
    // Case does not count as an edit: `Publish` is `publish` misspelled.
    let lower = word.to_ascii_lowercase();
    let limit = if lower.chars().count() <= 4 { 1 } else { 2 };
    names
        .iter()
        .map(|name| (edit_distance(&lower, name), *name))
        .filter(|&(d, name)| d <= limit && name != word)
        .min_by_key(|&(d, _)| d)
        .map(|(_, name)| name)
}

/// Levenshtein distance (insertions, deletions and substitutions of one character each).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// "did you mean `publish`? " when `token` is a misspelled argument name, else "".
fn hint(token: &impl ToString) -> String {
    match did_you_mean(&token.to_string()) {
        Some(name) => format!("did you mean `{name}`? "),
        None => String::new(),
    }
}

/// The parsed arguments.
pub(crate) struct Args {
    pub(crate) topic: Expr,
    pub(crate) publish: Option<Expr>,
    pub(crate) name: Option<LitStr>,
    pub(crate) capacity: Option<Expr>,
    pub(crate) stall_timeout: Option<Expr>,
    pub(crate) batch: Option<Span>,
    /// `reply`: the return value answers a request.
    pub(crate) reply: Option<Span>,
    pub(crate) retry: Option<Retry>,
    pub(crate) dead_letter: Option<Expr>,
    pub(crate) krate: Option<Path>,
}

/// `retry(..)`: each setting given, as the `RetryPolicy` method it calls and its value.
pub(crate) struct Retry {
    /// The `retry` keyword, for errors about the argument as a whole.
    pub(crate) span: Span,
    pub(crate) settings: Vec<(syn::Ident, Expr)>,
}

impl Parse for Retry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let kw: kw::retry = input.parse()?;
        let content;
        syn::parenthesized!(content in input);
        let mut settings: Vec<(syn::Ident, Expr)> = Vec::new();
        while !content.is_empty() {
            let key: syn::Ident = content.call(syn::ext::IdentExt::parse_any)?;
            let name = key.to_string();
            if !RETRY_NAMES.contains(&name.as_str()) {
                let hint = match nearest(&name, RETRY_NAMES) {
                    Some(near) => format!("did you mean `{near}`? "),
                    None => String::new(),
                };
                return Err(syn::Error::new_spanned(
                    key,
                    format!("unknown `retry` setting; {hint}valid settings: {RETRY_VALID}"),
                ));
            }
            if settings.iter().any(|(k, _)| *k == key) {
                return Err(syn::Error::new_spanned(
                    key,
                    format!("`{name}` is given twice in `retry(..)`"),
                ));
            }
            if !content.peek(Token![=]) {
                return Err(syn::Error::new_spanned(
                    &key,
                    format!(
                        "`{name}` needs a value: `{name} = ...`; valid settings: {RETRY_VALID}"
                    ),
                ));
            }
            content.parse::<Token![=]>()?;
            let value: Expr = content.parse()?;
            let value = match name.as_str() {
                "backoff" | "max_backoff" => duration(value)?,
                _ => value,
            };
            settings.push((key, value));
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        Ok(Retry {
            span: kw.span,
            settings,
        })
    }
}

enum Arg {
    Topic(Expr),
    Publish(Expr),
    Name(LitStr),
    Capacity(Expr),
    StallTimeout(Expr),
    Batch(Span),
    Reply(Span),
    Retry(Retry),
    DeadLetter(Expr),
    Crate(Path),
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let look = input.lookahead1();
        if look.peek(kw::publish) {
            input.parse::<kw::publish>()?;
            let content;
            syn::parenthesized!(content in input);
            return Ok(Arg::Publish(content.parse()?));
        }
        if look.peek(kw::retry) && input.peek2(syn::token::Paren) {
            return Ok(Arg::Retry(input.parse()?));
        }
        if look.peek(kw::dead_letter) && input.peek2(syn::token::Paren) {
            input.parse::<kw::dead_letter>()?;
            let content;
            syn::parenthesized!(content in input);
            return Ok(Arg::DeadLetter(content.parse()?));
        }
        if look.peek(kw::name) && input.peek2(Token![=]) {
            input.parse::<kw::name>()?;
            input.parse::<Token![=]>()?;
            return Ok(Arg::Name(input.parse()?));
        }
        if look.peek(kw::capacity) && input.peek2(Token![=]) {
            input.parse::<kw::capacity>()?;
            input.parse::<Token![=]>()?;
            return Ok(Arg::Capacity(input.parse()?));
        }
        if look.peek(kw::stall_timeout) && input.peek2(Token![=]) {
            input.parse::<kw::stall_timeout>()?;
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            return Ok(Arg::StallTimeout(duration(value)?));
        }
        if look.peek(kw::batch) && !input.peek2(Token![=]) && !input.peek2(syn::token::Paren) {
            let kw: kw::batch = input.parse()?;
            return Ok(Arg::Batch(kw.span));
        }
        if look.peek(kw::reply) && !input.peek2(Token![=]) && !input.peek2(syn::token::Paren) {
            let kw: kw::reply = input.parse()?;
            return Ok(Arg::Reply(kw.span));
        }
        if input.peek(Token![crate]) && input.peek2(Token![=]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            let lit: LitStr = input.parse()?;
            return Ok(Arg::Crate(lit.parse()?));
        }
        if input.peek(LitStr) {
            return Ok(Arg::Topic(input.parse()?));
        }
        // A path (a `const` naming the topic) is the topic; anything else is unknown.
        let fork = input.fork();
        if let Ok(path) = fork.parse::<Path>() {
            if fork.is_empty() || fork.peek(Token![,]) {
                input.parse::<Path>()?;
                let is_keywordish = path.get_ident().is_some_and(|i| {
                    let word = i.to_string();
                    word != "crate" && NAMES.contains(&word.as_str())
                });
                if !is_keywordish {
                    return Ok(Arg::Topic(Expr::Path(syn::ExprPath {
                        attrs: Vec::new(),
                        qself: None,
                        path,
                    })));
                }
                return Err(syn::Error::new_spanned(
                    path,
                    format!("this argument needs a value; valid arguments: {VALID}"),
                ));
            }
        }
        let unknown: proc_macro2::TokenTree = input.parse()?;
        let hint = hint(&unknown);
        Err(syn::Error::new_spanned(
            unknown,
            format!("unknown argument; {hint}the topic (a string literal or a const) comes first, then any of: {VALID}"),
        ))
    }
}

/// `"500ms"`, `"2s"`, `"1m"`, `"100us"` become a `Duration` expression; other expressions
/// are taken as they are.
fn duration(value: Expr) -> syn::Result<Expr> {
    let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Str(lit),
        ..
    }) = &value
    else {
        return Ok(value);
    };
    let text = lit.value();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || {
        syn::Error::new_spanned(
            lit,
            "expected a duration such as \"500ms\", \"2s\", \"1m\" or \"100us\", or a `Duration` expression",
        )
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let micros = match unit.trim() {
        "us" => n,
        "ms" => n.checked_mul(1_000).ok_or_else(bad)?,
        "s" => n.checked_mul(1_000_000).ok_or_else(bad)?,
        "m" => n.checked_mul(60_000_000).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok(syn::parse_quote!(::std::time::Duration::from_micros(#micros)))
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let span = input.span();
        let list = Punctuated::<Arg, Token![,]>::parse_terminated(input)?;
        let mut args = Args {
            topic: syn::parse_quote!(""),
            publish: None,
            name: None,
            capacity: None,
            stall_timeout: None,
            batch: None,
            reply: None,
            retry: None,
            dead_letter: None,
            krate: None,
        };
        let mut topic = None;
        for arg in list {
            match arg {
                Arg::Topic(t) => {
                    if topic.is_some() {
                        // A second bare word is more likely a misspelled flag (`batc`) than
                        // a second topic.
                        let hint = match &t {
                            Expr::Path(p) => p.path.get_ident().map(hint).unwrap_or_default(),
                            _ => String::new(),
                        };
                        return Err(syn::Error::new_spanned(
                            t,
                            format!("a subscriber has one topic; {hint}after it come: {VALID}"),
                        ));
                    }
                    topic = Some(t);
                }
                Arg::Publish(p) => args.publish = Some(p),
                Arg::Name(n) => args.name = Some(n),
                Arg::Capacity(c) => args.capacity = Some(c),
                Arg::StallTimeout(d) => args.stall_timeout = Some(d),
                Arg::Batch(s) => args.batch = Some(s),
                Arg::Reply(s) => args.reply = Some(s),
                Arg::Retry(r) => args.retry = Some(r),
                Arg::DeadLetter(t) => args.dead_letter = Some(t),
                Arg::Crate(p) => args.krate = Some(p),
            }
        }
        args.topic = topic.ok_or_else(|| {
            syn::Error::new(
                span,
                "missing topic: write #[subscriber(\"topic\")] (a string literal or a const)",
            )
        })?;
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::{did_you_mean, edit_distance};

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("publish", "publish"), 0);
        assert_eq!(edit_distance("publsh", "publish"), 1);
        assert_eq!(edit_distance("pubilsh", "publish"), 2);
        assert_eq!(edit_distance("", "name"), 4);
        assert_eq!(edit_distance("capacity", "capcity"), 1);
    }

    #[test]
    fn suggests_the_nearest_argument_name_only_when_close() {
        assert_eq!(did_you_mean("publsh"), Some("publish"));
        assert_eq!(did_you_mean("Publish"), Some("publish"));
        assert_eq!(did_you_mean("stall_timout"), Some("stall_timeout"));
        assert_eq!(did_you_mean("capasity"), Some("capacity"));
        assert_eq!(did_you_mean("batc"), Some("batch"));
        assert_eq!(did_you_mean("nam"), Some("name"));
        assert_eq!(did_you_mean("retyr"), Some("retry"));
        assert_eq!(did_you_mean("replay"), Some("reply"));
        assert_eq!(did_you_mean("dead_leter"), Some("dead_letter"));
        assert_eq!(
            super::nearest("atempts", super::RETRY_NAMES),
            Some("attempts")
        );
        // Not a near miss of any name, and not a name itself.
        assert_eq!(did_you_mean("retries"), None);
        assert_eq!(did_you_mean("publish"), None);
        assert_eq!(did_you_mean("id"), None);
    }
}
