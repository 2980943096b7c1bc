-- Quote posts an agent let through (FEP-044f): each answers a QuoteRequest with an Accept whose
-- result is the authorization's IRI, which must stay dereferenceable while the quote stands.
-- `key` is derived from the request's id, so a request answered twice is authorized once.
CREATE TABLE ap_quote_authorizations (
    key         TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    quoting     TEXT NOT NULL,
    quoted      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
