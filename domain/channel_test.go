package domain_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

func TestChannel_Mask(t *testing.T) {
	for _, tc := range []struct {
		name string
		ch   domain.ChannelSpec
		in   string
		want string
	}{
		{"SMS", domain.SMS, "+15551234567", "+1********67"},
		{"Email", domain.Email, "ada@example.com", "a***@example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ch.Mask(tc.in); got != tc.want {
				t.Errorf("%s.Mask(%q) = %q, want %q", tc.ch.Name, tc.in, got, tc.want)
			}
		})
	}
}

// TestRender_ToMasked: a message carries its address as its channel masks
// it, so nothing downstream guesses the channel's kind.
func TestRender_ToMasked(t *testing.T) {
	tpl, err := domain.LoadTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := mustDecode(t, `{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"phone":"+12025550123","email":"ada@example.com"}}`)
	for ch, want := range map[ports.Channel]string{ports.ChannelSMS: "+1********23", ports.ChannelEmail: "a***@example.com"} {
		m := mustRender(t, tpl, ev, ch)
		if m.ToMasked != want {
			t.Errorf("%s: ToMasked %q, want %q", ch, m.ToMasked, want)
		}
	}
}

// pigeon is a third channel as a test declares it: its own recipient field,
// address rule, mask and template block.
var pigeon = domain.ChannelSpec{
	Name:  "pigeon",
	Field: "loft",
	Normalize: func(a string) (string, error) {
		if strings.ContainsAny(a, " @") {
			return "", errTest("not a loft")
		}
		return strings.ToUpper(a), nil
	},
	Mask:      func(a string) string { return a[:1] + "***" },
	Blocks:    []string{"pigeon"},
	Templates: fstest.MapFS{"shipment.created.tmpl": {Data: []byte(`{{define "pigeon"}}Coo {{.ShipmentID}}{{end}}`)}},
	Render: func(r domain.Rendered, m *ports.Message) (err error) {
		m.Text, err = r.Text("pigeon")
		return err
	},
}

type errTest string

func (e errTest) Error() string { return string(e) }

func TestTemplates_ThirdChannel(t *testing.T) {
	tpl, err := domain.LoadTemplates(nil, domain.SMS, domain.Email, pigeon)
	if err == nil || !strings.Contains(err.Error(), `no {{define "pigeon"}}`) {
		t.Fatalf("LoadTemplates with a block missing for most types: %v, want it named", err)
	}
	pigeon := pigeon
	files := fstest.MapFS{}
	tpl, err = domain.LoadTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range tpl.Types() {
		files[typ+".tmpl"] = &fstest.MapFile{Data: []byte(`{{define "pigeon"}}Coo {{.ShipmentID}}{{end}}`)}
	}
	pigeon.Templates = files
	tpl, err = domain.LoadTemplates(nil, domain.SMS, domain.Email, pigeon)
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Channels(); len(got) != 3 || got[2] != "pigeon" {
		t.Fatalf("Channels() = %v", got)
	}

	t.Run("DecodeReadsItsField", func(t *testing.T) {
		ev, err := tpl.DecodeEvent([]byte(`{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"loft":"north"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Recipient.Address("pigeon") != "NORTH" || len(ev.Channels) != 1 || ev.Channels[0] != "pigeon" {
			t.Fatalf("event %+v", ev)
		}
		m := mustRender(t, tpl, ev, "pigeon")
		if m.Text != "Coo S" || m.ToMasked != "N***" || m.To != "NORTH" {
			t.Fatalf("message %+v", m)
		}
	})
	t.Run("BadAddressIsRefusedUnshown", func(t *testing.T) {
		_, err := tpl.DecodeEvent([]byte(`{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"loft":"north pole"}}`))
		if err == nil || !strings.Contains(err.Error(), "recipient.loft") || strings.Contains(err.Error(), "pole") {
			t.Fatalf("err = %v, want recipient.loft refused without its value", err)
		}
	})
	t.Run("BuiltinDecodeRefusesItsField", func(t *testing.T) {
		_, err := domain.Decode([]byte(`{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"phone":"+15551234567","loft":"north"}}`))
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Fatalf("err = %v, want loft unknown without the channel", err)
		}
	})
	t.Run("TwoChannelsOneFieldRefused", func(t *testing.T) {
		twin := pigeon
		twin.Name = "dove"
		if _, err := domain.LoadTemplates(nil, domain.SMS, pigeon, twin); err == nil {
			t.Fatal("LoadTemplates took two channels reading recipient.loft")
		}
	})
}
