package cosmostest_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// sign is the master-key token of the REST API's documentation, written
// out here to make requests the client would not.
func sign(key, method, typ, link, date string) string {
	k, _ := base64.StdEncoding.DecodeString(key)
	h := hmac.New(sha256.New, k)
	h.Write([]byte(strings.ToLower(method) + "\n" + strings.ToLower(typ) + "\n" + link + "\n" + strings.ToLower(date) + "\n\n"))
	return url.QueryEscape("type=master&ver=1.0&sig=" + base64.StdEncoding.EncodeToString(h.Sum(nil)))
}

// The signature covers the verb, the resource and the date: a token made
// for one request does not serve another, nor one signed with another key,
// nor an old one.
func TestSignatureCoversRequest(t *testing.T) {
	srv, c := newServer(t)
	newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	now := time.Now().UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name         string
		method, path string
		auth         string
		date         string
		want         int
	}{
		{"the account, signed", "GET", "/", sign(srv.Key(), "GET", "", "", now), now, http.StatusOK},
		{"a container, signed", "GET", "/dbs/db/colls/items", sign(srv.Key(), "GET", "colls", "dbs/db/colls/items", now), now, http.StatusOK},
		{"another container's token", "GET", "/dbs/db/colls/items", sign(srv.Key(), "GET", "colls", "dbs/db/colls/other", now), now, http.StatusUnauthorized},
		{"another verb's token", "DELETE", "/dbs/db/colls/items", sign(srv.Key(), "GET", "colls", "dbs/db/colls/items", now), now, http.StatusUnauthorized},
		{"another key", "GET", "/", sign("d3Jvbmcga2V5", "GET", "", "", now), now, http.StatusUnauthorized},
		{"no token", "GET", "/", "", now, http.StatusUnauthorized},
		{"an AAD token", "GET", "/", url.QueryEscape("type=aad&ver=1.0&sig=x"), now, http.StatusUnauthorized},
		{"a date 20 minutes old", "GET", "/", sign(srv.Key(), "GET", "", "", time.Now().Add(-20*time.Minute).UTC().Format(http.TimeFormat)),
			time.Now().Add(-20 * time.Minute).UTC().Format(http.TimeFormat), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, strings.TrimSuffix(srv.URL(), "/")+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("x-ms-date", tc.date)
			req.Header.Set("x-ms-version", "2020-11-05")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := srv.HTTPClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
	if srv.Key() != cosmostest.EmulatorKey {
		t.Fatal("the default key is not the emulator's")
	}
}

// Request charges follow the package doc's model.
func TestRequestCharge(t *testing.T) {
	srv, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	before := srv.Stats().RequestCharge
	small, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "s", "pk": "a"}), nil)
	if err != nil || small.RequestCharge != 5 {
		t.Fatalf("create of a small item: %v RU, %v; want 5", small.RequestCharge, err)
	}
	big, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "b", "pk": "a", "v": strings.Repeat("x", 2500)}), nil)
	if err != nil || big.RequestCharge != 15 {
		t.Fatalf("create of a 3 KB item: %v RU, %v; want 15", big.RequestCharge, err)
	}
	read, err := cc.ReadItem(ctx, pk("a"), "s", nil)
	if err != nil || read.RequestCharge != 1 {
		t.Fatalf("read of a small item: %v RU, %v; want 1", read.RequestCharge, err)
	}
	page, err := cc.NewQueryItemsPager("SELECT * FROM c WHERE c.id = 's'", pk("a"), nil).NextPage(ctx)
	if err != nil || page.RequestCharge != 3.5 {
		t.Fatalf("query returning one small item: %v RU, %v; want 3.5", page.RequestCharge, err)
	}
	if got := srv.Stats().RequestCharge - before; got != 5+15+1+3.5 {
		t.Fatalf("Stats counted %v RU, want %v", got, 5+15+1+3.5)
	}
}
