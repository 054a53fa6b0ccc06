package ports

import (
	"net/mail"
	"net/url"
	"strings"
	"unicode/utf8"
)

// The masking functions keep enough of an address for an operator to tell two
// customers apart in a log or an error, and too little to contact either.
// They are here, not in an adapter, because every adapter and the domain log
// recipients and adapters must not import each other.

// MaskPhone masks the middle of a phone number: an E.164 number keeps its
// first 5 and last 4 characters ("+15551234567" -> "+1555***4567"). A number
// too short for that to hide at least 3 characters keeps less; one of 6
// characters or fewer is masked whole. It never returns its input unchanged
// unless the input is empty.
func MaskPhone(phone string) string {
	if phone == "" {
		return ""
	}
	r := []rune(phone)
	head, tail := 5, 4
	if len(r) < head+tail+3 {
		// Keeping 5+4 of a short number would reveal it almost whole.
		head, tail = 2, 2
	}
	if len(r) < head+tail+3 {
		return "***"
	}
	return string(r[:head]) + "***" + string(r[len(r)-tail:])
}

// MaskEmail keeps the first character of the local part and the domain
// ("ada@example.com" -> "a***@example.com"). A display name, if the input has
// one ("Ada <ada@example.com>"), is dropped: it is personal data too. Input
// without an '@' is masked whole but for its first character.
func MaskEmail(email string) string {
	if email == "" {
		return ""
	}
	if a, err := mail.ParseAddress(email); err == nil {
		email = a.Address
	}
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return firstRune(email) + "***"
	}
	return firstRune(email[:at]) + "***" + email[at:]
}

// MaskAddress masks addr as the address of channel ch: MaskPhone for SMS,
// MaskEmail for email. For a channel it does not know, it guesses from the
// shape of addr, so that an unknown channel never leaks an address in clear.
func MaskAddress(ch Channel, addr string) string {
	switch ch {
	case ChannelSMS:
		return MaskPhone(addr)
	case ChannelEmail:
		return MaskEmail(addr)
	}
	if strings.Contains(addr, "@") {
		return MaskEmail(addr)
	}
	return MaskPhone(addr)
}

func firstRune(s string) string {
	_, n := utf8.DecodeRuneInString(s)
	return s[:n]
}

// MaskURL returns raw with the password of its user info (and any
// "password" query parameter) replaced by "***". A value that does not parse
// is masked whole: without a parse there is no telling where a password sits.
func MaskURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "***"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "PASSWORD")
		// Encode escapes "*", so set a placeholder and swap it afterwards.
		u.RawQuery = strings.Replace(q.Encode(), "password=PASSWORD", "password=***", 1)
	}
	if _, hasPassword := u.User.Password(); !hasPassword {
		return u.String()
	}
	// url.UserPassword would escape "***" to "%2A%2A%2A"; print the user
	// info by hand so the log reads as the operator wrote it.
	user := url.User(u.User.Username()).String()
	rest := *u
	rest.User = nil
	return u.Scheme + "://" + user + ":***@" + strings.TrimPrefix(rest.String(), u.Scheme+"://")
}
