package ports

import (
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
)

// The masking functions keep enough of an address for an operator to tell two
// customers apart in a log or an error, and too little to contact either.
// They are here, not in an adapter, because every adapter and the domain log
// recipients and adapters must not import each other. A channel names its
// mask (domain.Channel.Mask), which fills ports.Message.ToMasked.

// MaskPhone masks a phone number down to its country code and at most its
// last 2 digits ("+15551234567" -> "+1********67"): enough to tell a
// customer's country and two customers apart in one incident, too little to
// find either. Each masked character becomes one "*", so the length shows.
//
// The country code is recognised by libphonenumber's list of calling codes
// (1 to 3 digits; no code is a prefix of another). Input that does not
// start with "+" and a known code keeps no head. The last 2 characters are
// kept only when they are digits and at least 6 characters are masked;
// anything shorter is masked whole. It never returns its input unchanged
// unless the input is empty.
func MaskPhone(phone string) string {
	if phone == "" {
		return ""
	}
	r := []rune(phone)
	head := 0
	if r[0] == '+' {
		if n := callingCodeLen(r[1:]); n > 0 {
			head = 1 + n
		}
	}
	rest := len(r) - head
	tail := 0
	if rest >= phoneMaskedMin+phoneKeptMax && isDigit(r[len(r)-1]) && isDigit(r[len(r)-2]) {
		tail = phoneKeptMax
	}
	if rest == 0 || (head == 0 && tail == 0) {
		// Nothing to keep: mask every character, "+" included.
		return strings.Repeat("*", max(len(r), 3))
	}
	return string(r[:head]) + strings.Repeat("*", rest-tail) + string(r[len(r)-tail:])
}

// phoneKeptMax is how many trailing digits MaskPhone keeps, and
// phoneMaskedMin how many characters it must hide for it to keep them.
const (
	phoneKeptMax   = 2
	phoneMaskedMin = 6
)

// callingCodeLen returns how many of the leading digits of r are a country
// calling code, or 0 when none is.
func callingCodeLen(r []rune) int {
	code := 0
	for n := 1; n <= 3 && n <= len(r); n++ {
		if !isDigit(r[n-1]) {
			return 0
		}
		code = code*10 + int(r[n-1]-'0')
		if callingCodes()[code] {
			return n
		}
	}
	return 0
}

// callingCodes is libphonenumber's set of country calling codes,
// geographic and global-network ones alike.
var callingCodes = sync.OnceValue(func() map[int]bool {
	codes := map[int]bool{}
	for c := range phonenumbers.GetSupportedCallingCodes() {
		codes[c] = true
	}
	for c := range phonenumbers.GetSupportedGlobalNetworkCallingCodes() {
		codes[c] = true
	}
	return codes
})

func isDigit(c rune) bool { return c >= '0' && c <= '9' }

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
