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
}

/// What may follow the topic, for error messages.
pub(crate) const VALID: &str =
    "`publish(\"topic\")`, `name = \"...\"`, `capacity = N`, `stall_timeout = \"500ms\"`, `batch`, `crate = \"path\"`";

/// The parsed arguments.
pub(crate) struct Args {
    pub(crate) topic: Expr,
    pub(crate) publish: Option<Expr>,
    pub(crate) name: Option<LitStr>,
    pub(crate) capacity: Option<Expr>,
    pub(crate) stall_timeout: Option<Expr>,
    pub(crate) batch: Option<Span>,
    pub(crate) krate: Option<Path>,
}

enum Arg {
    Topic(Expr),
    Publish(Expr),
    Name(LitStr),
    Capacity(Expr),
    StallTimeout(Expr),
    Batch(Span),
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
                    ["publish", "name", "capacity", "stall_timeout", "batch"]
                        .contains(&i.to_string().as_str())
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
        Err(syn::Error::new_spanned(
            unknown,
            format!("unknown argument; the topic (a string literal or a const) comes first, then any of: {VALID}"),
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
            krate: None,
        };
        let mut topic = None;
        for arg in list {
            match arg {
                Arg::Topic(t) => {
                    if topic.is_some() {
                        return Err(syn::Error::new_spanned(
                            t,
                            format!("a subscriber has one topic; after it come: {VALID}"),
                        ));
                    }
                    topic = Some(t);
                }
                Arg::Publish(p) => args.publish = Some(p),
                Arg::Name(n) => args.name = Some(n),
                Arg::Capacity(c) => args.capacity = Some(c),
                Arg::StallTimeout(d) => args.stall_timeout = Some(d),
                Arg::Batch(s) => args.batch = Some(s),
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
