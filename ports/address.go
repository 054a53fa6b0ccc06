package ports

import (
	"errors"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
)

// What an SMS and an email address are, for every side of the ports: the
// domain normalises an event's addresses with these, and refuses the rest;
// the masks below say what of an address a log may show.

// MaxEmailLen is the longest email address: RFC 5321's path limit.
const MaxEmailLen = 254

// NormalizePhone returns p in E.164 ("+", a country code and the national
// number, 15 digits at most), after dropping surrounding white space and the
// separators people write: spaces, dots, dashes and parentheses. The number
// must start with "+": a leading "00" or a national number is ambiguous
// without a known dialing country, so it is an error.
//
// The number is checked against libphonenumber's numbering plans
// (github.com/nyaruka/phonenumbers): a country code that does not exist, a
// length no number of that country has, or a number in no range the country
// assigns is an error, before any provider is asked to send to it. A trunk
// prefix written after the country code ("+44 (0)20 ...") is dropped, as
// dialing from abroad does. Its output is a fixed point:
// NormalizePhone(out) returns out. Its errors never quote a digit of p.
func NormalizePhone(p string) (string, error) {
	p = strings.TrimSpace(p)
	var b strings.Builder
	for i, r := range p {
		switch {
		case r == '+' && i == 0:
			b.WriteByte('+')
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == ' ' || r == '.' || r == '-' || r == '(' || r == ')':
		default:
			return "", errors.New("not an E.164 phone number: unexpected character")
		}
	}
	s := b.String()
	switch {
	case !strings.HasPrefix(s, "+"):
		return "", errors.New("not an E.164 phone number: must start with +")
	case len(s) > maxPhoneDigits+1:
		// A trunk prefix may add a digit or two to the 15 of E.164; more
		// than that is no number.
		return "", errors.New("impossible phone number: too long")
	}
	return phones.get(s)
}

// checkPhone is NormalizePhone's check of s, a "+" and at most
// maxPhoneDigits digits, against the numbering plans.
func checkPhone(s string) (string, error) {
	num, err := phonenumbers.Parse(s, "ZZ") // no default country: s carries its own
	if err != nil {
		// phonenumbers' errors name no digits, but say it in our words:
		// its texts are not a contract.
		if errors.Is(err, phonenumbers.ErrInvalidCountryCode) {
			return "", errors.New("impossible phone number: no country has this country code")
		}
		return "", errors.New("impossible phone number: too short or too long")
	}
	switch phonenumbers.IsPossibleNumberWithReason(num) {
	case phonenumbers.IS_POSSIBLE, phonenumbers.IS_POSSIBLE_LOCAL_ONLY:
	case phonenumbers.INVALID_COUNTRY_CODE:
		return "", errors.New("impossible phone number: no country has this country code")
	case phonenumbers.TOO_SHORT:
		return "", errors.New("impossible phone number: too short for its country")
	case phonenumbers.TOO_LONG:
		return "", errors.New("impossible phone number: too long for its country")
	default:
		return "", errors.New("impossible phone number: no number of its country has this length")
	}
	if !phonenumbers.IsValidNumber(num) {
		return "", errors.New("invalid phone number: in no range its country assigns")
	}
	out := phonenumbers.Format(num, phonenumbers.E164)
	if len(out) > 16 {
		// Some plans allow longer numbers than E.164 (and Twilio) carry.
		return "", errors.New("impossible phone number: more digits than E.164 allows")
	}
	if !onlyTrunkDropped(s[1:], out[1:]) {
		// A few plans rewrite a national number (Norfolk Island adds a
		// digit): we send to the number the producer wrote, or to none.
		return "", errors.New("not an E.164 phone number: written in a national form its country rewrites")
	}
	return out, nil
}

// phones remembers checkPhone's answers: parsing a number against the
// numbering plans is most of the CPU a record costs, and the same customers
// get a notification per shipment event. checkPhone is a pure function of
// its argument, so an answer remembered is the answer computed.
// It holds 8192 numbers: at about 100 bytes an entry, under a MiB.
var phones = &phoneCache{max: 8192}

// phoneCache is a bounded memo of checkPhone, safe for concurrent use. When
// full it starts over empty: no eviction order to keep, and a worker's
// working set of numbers refills it at once.
type phoneCache struct {
	mu  sync.Mutex
	max int
	m   map[string]phoneAnswer
}

type phoneAnswer struct {
	out string
	err error
}

// get returns checkPhone(s), from memory when s was asked before.
func (c *phoneCache) get(s string) (string, error) {
	c.mu.Lock()
	a, ok := c.m[s]
	c.mu.Unlock()
	if ok {
		return a.out, a.err
	}
	out, err := checkPhone(s)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[string]phoneAnswer, c.max)
	}
	c.m[s] = phoneAnswer{out, err}
	c.mu.Unlock()
	return out, err
}

// onlyTrunkDropped reports whether the digits out are the digits in, or in
// with a run of at most two digits (a trunk prefix) removed right after a
// country code of one to three digits.
func onlyTrunkDropped(in, out string) bool {
	n := len(in) - len(out)
	switch {
	case n == 0:
		return in == out
	case n < 0 || n > 2:
		return false
	}
	for cc := 1; cc <= 3 && cc <= len(out); cc++ {
		if in[:cc] == out[:cc] && in[cc+n:] == out[cc:] {
			return true
		}
	}
	return false
}

// maxPhoneDigits is the most digits NormalizePhone reads: 15 (E.164) and
// room for a trunk prefix written after the country code.
const maxPhoneDigits = 17

// PhoneShaped reports whether v holds only what a written phone number
// does: digits, "+" and the separators NormalizePhone drops, 32 bytes at
// most.
func PhoneShaped(v string) bool {
	return len(v) <= 32 && strings.Trim(v, "+0123456789 .-()") == ""
}

// EmailShaped reports whether v could be an email address: at most
// MaxEmailLen bytes, one "@", and no space, control or format character.
func EmailShaped(v string) bool {
	if len(v) > MaxEmailLen || strings.Count(v, "@") != 1 {
		return false
	}
	for _, r := range v {
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
}

// The masking functions keep enough of an address for an operator to tell two
// customers apart in a log or an error, and too little to contact either.
// They are here, not in an adapter, because every adapter and the domain log
// recipients and adapters must not import each other. A channel names its
// mask (domain.ChannelSpec.Mask), which fills ports.Message.ToMasked.

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
